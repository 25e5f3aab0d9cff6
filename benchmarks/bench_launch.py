"""Benchmark `distrun launch` against plain torchrun on the same trivial 2-process job.

Prints, best of N runs each:
  * wall time of `python -m torch.distributed.run --nproc-per-node 2 job.py` and of
    `distrun launch --nproc-per-node 2 job.py`, and distrun's overhead (goal: within 5%);
  * the time from a rank's crash (it writes the time, then raises) to the launcher's exit,
    for both (how fast a failed job ends).

Run:  .venv/bin/python benchmarks/bench_launch.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
"""

CRASH = """\
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(1)
    open(sys.argv[1], "w").write(repr(time.time()))
    raise RuntimeError("crash on purpose")
dist.all_reduce(torch.ones(1))
time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
            f"--master-port={free_port()}", str(script), *args]


def distrun(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2", str(script),
            *args]


def best_wall(command: list[str], repeat: int, expect_ok: bool = True) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if expect_ok and done.returncode != 0:
            sys.exit(f"command failed: {command}\n{done.stderr}")
    return min(times)


def crash_to_exit(make: object, script: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            stamp = Path(tmp) / "crash_time"
            subprocess.run(make(script, str(stamp)), capture_output=True)  # type: ignore[operator]
            ended = time.time()
            best = min(best, ended - float(stamp.read_text()))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job, crash = Path(tmp) / "job.py", Path(tmp) / "crash.py"
        job.write_text(JOB)
        crash.write_text(CRASH)
        best_wall(torchrun(job), 1)  # warm the file cache
        plain_times, our_times = [], []
        for _ in range(args.repeat):  # interleaved, so drift hits both alike
            plain_times.append(best_wall(torchrun(job), 1))
            our_times.append(best_wall(distrun(job), 1))
        plain, ours = min(plain_times), min(our_times)
        overhead = (ours - plain) / plain * 100
        crash_plain = crash_to_exit(torchrun, crash, max(1, args.repeat // 2))
        crash_ours = crash_to_exit(distrun, crash, max(1, args.repeat // 2))
    print(f"{'measure':44} {'torchrun':>9} {'distrun':>9}")
    print("-" * 64)
    label = f"trivial 2-process job, wall (best of {args.repeat})"
    print(f"{label:44} {plain:9.3f} {ours:9.3f}")
    mid_plain, mid_ours = sorted(plain_times)[args.repeat // 2], sorted(our_times)[args.repeat // 2]
    print(f"{'  the same, median':44} {mid_plain:9.3f} {mid_ours:9.3f}")
    print(f"{'crash of rank 1 -> launcher exit (s)':44} {crash_plain:9.3f} {crash_ours:9.3f}")
    print()
    verdict = "MET" if overhead <= 5 else "MISSED"
    print(f"goal: launch overhead within 5% of torchrun: {overhead:+.1f}% -> {verdict}")


if __name__ == "__main__":
    main()
