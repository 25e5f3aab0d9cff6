"""`distrun launch` when something goes wrong under a real job (torchrun, 2 CPU ranks, gloo
on 127.0.0.1): a rank killed from outside, a rank hanging in a collective, a rank that
returns early, the master port taken after distrun checked it, distrun itself killed, and
a full disk under the logs. Each time: the job ends (the test waits for that with a limit
generous enough for a loaded machine, never for a fixed time), the exit code and the report
say what happened, and no process of the test is left behind."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrun.launch.resolve import free_port
from tests.conftest import leftovers, marked_processes
from tests.jobs import Job

pytestmark = pytest.mark.e2e

# Every rank all-reduces once per step and says so; FAULT picks what rank 1 does at step 3.
TRAIN = """\
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
fault = os.environ.get("FAULT", "")
print(f"rank {rank} pid {os.getpid()}", flush=True)
for step in range(100_000):
    if rank == 1 and step == 3 and fault == "hang":
        time.sleep(3600)  # never joins the next all_reduce
    if rank == 1 and step == 3 and fault == "return":
        sys.exit(0)  # leaves rank 0 in an all_reduce nobody else joins
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {rank} step {step} sum {total.item():g}" + "x" * int(os.environ.get("PAD", 0)),
          flush=True)
    time.sleep(float(os.environ.get("PAUSE", 0.2)))
"""

# Rank 1 returns at once; rank 0 waits without gloo noticing (as NCCL may wait for ever).
RETURN_THEN_WAIT = """\
import sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} up", flush=True)
if dist.get_rank() == 1:
    sys.exit(0)
time.sleep(3600)
"""

HELLO = "print('hello', flush=True)\n"

# Busy for 8 s of CPU time before its first line (as a slow import of torch is on a
# loaded machine), then silent: only the silence after "up" is a hang.
SLOW_START = """\
import time
started = time.process_time()
while time.process_time() - started < 8:
    pass
print("up", flush=True)
time.sleep(3600)
"""


@pytest.fixture(autouse=True)
def reap(tmp_path: Path) -> Iterator[None]:
    """Whatever a test leaves running (it failed half-way) is killed after it: by pid, only
    processes whose command line names the test's own folder."""
    yield
    for _ in range(3):
        for pid in marked_processes(tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def report(stderr: str) -> str:
    """distrun's own report: from its first 'distrun: error' line on."""
    assert "distrun: error:" in stderr, stderr[-3000:]
    return stderr[stderr.index("distrun: error:"):]


def no_leftovers(marker: Path, within: float = 10) -> float:
    """Wait until no process of the test is left; the seconds it took."""
    started = time.monotonic()
    while leftovers(marker) and time.monotonic() - started < within:
        time.sleep(0.1)
    assert leftovers(marker) == []
    return time.monotonic() - started


def clean_stderr(stderr: str) -> None:
    """No traceback of distrun's nor torchrun's own; no internal error."""
    assert not re.search(r"^Traceback", stderr, re.M), stderr[-3000:]
    assert "internal error" not in stderr and "ChildFailedError" not in stderr


def script(folder: Path, text: str, name: str = "train.py") -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


def test_a_rank_killed_from_outside_mid_step(tmp_path: Path) -> None:
    job = Job(tmp_path, "--nproc-per-node", "2", script(tmp_path, TRAIN))
    pid = int(job.wait_for(r"^rank 1 pid (\d+)")[1])
    job.wait_for(r"^rank 1 step 3 ")
    os.kill(pid, signal.SIGKILL)
    code, stderr, _ = job.finish(timeout=120)  # ends: gloo's own timeout would be 30 min
    assert code == 1
    text = report(stderr)
    killed = re.search(r"^  rank 1 \(local rank 1\) on \S+: killed by SIGKILL( \[first failure\])?",
                       text, re.M)
    assert killed, text
    if not killed[1]:  # rank 0 failed first: then because it lost its peer, rank 1
        first = re.search(r"^  rank 0 .*\[first failure\]\n(?:    \|.*\n)*  lost peer", text, re.M)
        assert first, text
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_rank_hanging_in_a_collective_is_stopped_by_the_timeout(tmp_path: Path) -> None:
    job = Job(tmp_path, "--nproc-per-node", "2", "--timeout", "4", script(tmp_path, TRAIN),
              env={"FAULT": "hang"})
    job.wait_for(r"^rank 0 step 2 ")
    code, stderr, _ = job.finish(timeout=120)
    assert code == 124
    text = report(stderr)
    assert "made no progress: no output from any rank for 4 s" in text
    assert "stopped (--timeout)" in text and "collective" in text
    assert "ended" not in text  # both ranks were alive: none is named as gone
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_rank_returning_early_ends_the_job_and_is_named(tmp_path: Path) -> None:
    """gloo: rank 0's all_reduce loses its connection to rank 1, which returned 0."""
    job = Job(tmp_path, "--nproc-per-node", "2", script(tmp_path, TRAIN),
              env={"FAULT": "return"})
    job.wait_for(r"^rank 1 step 2 ")
    code, stderr, _ = job.finish(timeout=120)
    assert code == 1
    text = report(stderr)
    assert re.search(r"^  rank 0 \(local rank 0\) on \S+: exit code 1 \[first failure\]", text,
                     re.M), text
    assert re.search(r"^  rank 1 \(local rank 1\) on \S+: exit code 0 while the others still "
                     r"ran \[ended early\]", text, re.M), text
    assert "every rank must run the same collectives" in text
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_rank_returning_early_while_others_wait_silently(tmp_path: Path) -> None:
    """Where nothing errors (NCCL can wait for ever), --timeout ends it and names the rank
    that was gone."""
    job = Job(tmp_path, "--nproc-per-node", "2", "--timeout", "4",
              script(tmp_path, RETURN_THEN_WAIT))
    code, stderr, _ = job.finish(timeout=120)
    assert code == 124
    text = report(stderr)
    assert "no output from any rank for 4 s" in text
    assert re.search(r"^  rank 1 \(local rank 1\): had already ended \(exit code 0\)", text,
                     re.M), text
    assert "rank 0 (local rank 0)" not in text  # it was alive, waiting
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_slow_start_is_not_a_hang(tmp_path: Path) -> None:
    """--timeout counts silence, not start-up: a process busy on the CPU before its first
    line (importing torch, on a loaded machine) is starting, not hung."""
    job = Job(tmp_path, "--nproc-per-node", "1", "--timeout", "3", script(tmp_path, SLOW_START))
    job.wait_for(r"^up$")  # the start took longer than --timeout: not stopped for it
    code, stderr, _ = job.finish(timeout=120)
    assert code == 124  # the silence after the first line is
    assert "no output from any rank for 3 s" in report(stderr)
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_master_port_in_use_before_the_start_is_exit_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        job = Job(tmp_path, "--nproc-per-node", "2", "--master-port", str(port),
                  script(tmp_path, HELLO))
        code, stderr, _ = job.finish(timeout=120)
    assert code == 2
    assert f"master port {port} is already in use" in stderr
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_master_port_taken_between_the_check_and_torchrun(tmp_path: Path) -> None:
    """The port is free when distrun checks it; the test takes it as soon as torchrun's
    process exists (torchrun needs a second to import torch before it listens)."""
    port = free_port()
    job = Job(tmp_path, "--nproc-per-node", "2", "--master-port", str(port),
              script(tmp_path, HELLO))
    thief = socket.socket()
    try:
        deadline = time.monotonic() + 60
        while not [c for c in leftovers(tmp_path) if "torch.distributed.run" in c]:
            assert time.monotonic() < deadline and job.proc.poll() is None, job.err
            time.sleep(0.005)
        thief.bind(("0.0.0.0", port))
        thief.listen()
        code, stderr, _ = job.finish(timeout=120)
    finally:
        thief.close()
    assert code == 2
    text = report(stderr)
    assert text.startswith(f"distrun: error: master port {port} was taken by another process"), (
        text)
    assert "no worker started" in text and "hello" not in "\n".join(job.out)
    clean_stderr(stderr)
    no_leftovers(tmp_path)


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_killing_distrun_itself_ends_every_worker(tmp_path: Path, launcher: str) -> None:
    job = Job(tmp_path, "--launcher", launcher, "--nproc-per-node", "2",
              script(tmp_path, TRAIN))
    job.wait_for(r"^rank 1 step 2 ")
    # the worker: `python -u [.../boot.py] .../train.py` (boot: the default check)
    workers = [c for c in leftovers(tmp_path) if re.search(r" -u (\S+boot\.py )?\S+train\.py $", c)]
    assert len(workers) == 2, leftovers(tmp_path)
    job.proc.kill()  # SIGKILL: distrun gets no chance to clean up
    job.proc.wait(timeout=10)
    seconds = no_leftovers(tmp_path, within=15)
    assert seconds < 10, f"workers outlived distrun for {seconds:.1f} s"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare to mount a 64 KiB tmpfs in a private namespace")
def test_a_full_disk_under_the_logs_is_reported(tmp_path: Path) -> None:
    """The ranks' output goes through --log-dir (torchrun tees it from there): when that
    disk is full a rank cannot print, the job fails, and the report says why."""
    logs = tmp_path / "logs"
    logs.mkdir()
    mount = f"mount -t tmpfs -o size=64k tmpfs {logs} && exec \"$@\""
    job = Job(tmp_path, "--nproc-per-node", "2", "--log-dir", str(logs / "run"),
              script(tmp_path, TRAIN), env={"PAD": "400", "PAUSE": "0"},
              prefix=("unshare", "-m", "sh", "-c", mount, "sh"))
    code, stderr, seconds = job.finish(timeout=90)
    assert code == 1, stderr[-3000:]
    assert f"only 64 KiB free for the logs in {logs / 'run'}" in stderr  # warned at the start
    text = report(stderr)
    assert f"the file system of the log folder {logs / 'run'} is full" in text
    assert "pass --log-dir on a disk with room" in text
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_a_log_dir_that_cannot_be_created_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    job = Job(tmp_path, "--nproc-per-node", "2", "--log-dir", str(tmp_path / "a-file" / "logs"),
              script(tmp_path, HELLO))
    code, stderr, _ = job.finish(timeout=60)
    assert code == 2
    assert f"--log-dir {tmp_path / 'a-file' / 'logs'}: cannot create it: Not a directory" in stderr
    clean_stderr(stderr)
    no_leftovers(tmp_path)


def test_the_reader_of_distruns_output_going_away_does_not_end_the_job(tmp_path: Path
                                                                        ) -> None:
    """`distrun launch ... | head -1`: the job goes on to the end, exit 0, no traceback;
    what could not be shown is in the log folder, which is kept and named."""
    path = script(tmp_path, "import sys, time, torch.distributed as dist\n"
                  "dist.init_process_group('gloo')\n"
                  "for i in range(60):\n"
                  "    sys.stdout.write(f'line {i} rank {dist.get_rank()}\\n'); time.sleep(0.02)\n"
                  "open(f'done{dist.get_rank()}', 'w').close()\n"
                  "dist.destroy_process_group()\n")
    shown = subprocess.run(
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m distrun launch --nproc-per-node 2 "
         f"{shlex.quote(path)} 2>err.txt | head -n 1; echo \"exit=${{PIPESTATUS[0]}}\""],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.stdout.splitlines()[0].startswith("line 0 rank ")
    assert shown.stdout.splitlines()[-1] == "exit=0", shown.stdout
    assert (tmp_path / "done0").exists() and (tmp_path / "done1").exists()
    stderr = (tmp_path / "err.txt").read_text()
    clean_stderr(stderr)
    assert "standard output was closed; the job goes on" in stderr
    kept = re.search(r"the output of every rank is in (\S+)", stderr)
    assert kept, stderr
    logs = "".join(p.read_text() for p in Path(kept[1]).rglob("stdout.log"))
    assert "line 59 rank 0" in logs and "line 59 rank 1" in logs
    shutil.rmtree(kept[1])
    no_leftovers(tmp_path)
