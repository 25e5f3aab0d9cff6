"""Benchmark what the checks of `distrun launch` cost a training job.

Runs the same DDP job (an MLP of 4 layers, a DataLoader with a DistributedSampler, SGD)
on 2 CPU processes with `distrun launch --no-check`, with the default check (the first 8
optimizer steps, then the probe removes its hooks) and with `--check` (to the end), the
three interleaved round by round, and prints, best of N rounds each:
  * the window: the time of steps 1 to 8 (batch fetched, forward, backward, optimizer
    step, as the script measures it), where the default check watches;
  * the steady state: the mean step of steps 21 to the end, where the default check is
    gone and --check still runs;
  * the steps at which the probe fingerprints the parameters (1, 2, 4, 8...): the time of
    the slowest of them;
  * the wall time of the whole launch.
Also checks that the three runs end with the same weights (the probe must not change the
training); exit 1 if not.

Run:  .venv/bin/python benchmarks/bench_check.py [--repeat 3] [--steps 300] [--width 512]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """\
import gc, json, os, sys, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

steps, width = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(steps * 32 * 2, width), torch.randint(0, 10, (steps * 64,)))
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
ddp_model = DDP(model)
optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
times, last = [], time.perf_counter()
for x, y in loader:  # a step's time includes fetching its batch
    optimizer.zero_grad()
    nn.functional.cross_entropy(ddp_model(x), y).backward()
    optimizer.step()
    now = time.perf_counter()
    times.append(now - last)
    last = now
if dist.get_rank() == 0:
    torch.save(model.state_dict(), sys.argv[3])
    print("TIMES " + json.dumps(times))
del ddp_model, optimizer
gc.collect()  # free DDP's finished communication first: gloo can abort at exit
dist.destroy_process_group()
"""


TEARDOWN_ABORT = "terminate called without an active exception"


MODES = {"--no-check": ["--no-check"], "default": [], "--check": ["--check"]}


def run(script: Path, steps: int, width: int, out: Path, mode: str) -> tuple[list[float], float]:
    command = [sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2",
               *MODES[mode], str(script), str(steps), str(width), str(out)]
    for _ in range(3):
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - started
        # torch's gloo sometimes aborts a rank at exit, after the training (about 1 run
        # in 40 here, with or without --check): such a run is run again
        if result.returncode == 0 or TEARDOWN_ABORT not in result.stderr:
            break
        print(f"  (a rank aborted at exit: {TEARDOWN_ABORT!r}; run again)")
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    if mode != "--no-check" and "no problem found" not in result.stderr:
        sys.exit(f"{mode} found a problem in a correct job:\n{result.stderr[-3000:]}")
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("TIMES "))
    return json.loads(line[6:]), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    import torch

    rounds: dict[str, list[tuple[float, float, float, float]]] = {m: [] for m in MODES}
    weights = {}
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "job.py"
        script.write_text(JOB)
        for _ in range(args.repeat):  # interleaved: a slow spell of the machine hits all
            for mode in MODES:
                out = Path(folder) / f"model-{mode}.pt"
                times, wall = run(script, args.steps, args.width, out, mode)
                steady = times[20:]
                probed = max(times[i - 1] for i in (1, 2, 4, 8, 16, 32, 64, 128, 256)
                             if i <= len(times))
                rounds[mode].append((sum(steady) / len(steady), sum(times[:8]), probed, wall))
                weights[mode] = torch.load(out)
    best = {mode: (min(r[0] for r in rs), min(r[1] for r in rs), min(r[2] for r in rs),
                   min(r[3] for r in rs)) for mode, rs in rounds.items()}
    plain = weights["--no-check"]
    same = all(torch.equal(plain[k], weights[m][k]) for m in MODES for k in plain)
    params = sum(v.numel() for v in plain.values())
    print(f"{args.steps} steps of an MLP with {params:,} parameters, 2 CPU processes (gloo), "
          f"best of {args.repeat} interleaved rounds:")
    for mode, (step, window, probed, wall) in best.items():
        print(f"  {mode:<10}  steps 1-8 {window * 1000:8.2f} ms   step 21+ {step * 1000:7.2f} ms"
              f"   slowest fingerprinted step {probed * 1000:7.2f} ms   launch {wall:5.1f} s")
    base = best["--no-check"]
    for mode in ("default", "--check"):
        print(f"  {mode}: window {100 * (best[mode][1] / base[1] - 1):+.1f}%, steady state "
              f"{100 * (best[mode][0] / base[0] - 1):+.1f}% against --no-check")
    print(f"  same weights in the three modes: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
