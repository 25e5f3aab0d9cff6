"""Benchmark what `distrun launch --check` costs a training job.

Runs the same DDP job (an MLP of 4 layers, a DataLoader with a DistributedSampler, SGD)
on 2 CPU processes with `distrun launch`, then with `distrun launch --check`, and prints,
best of N runs each:
  * the mean time of a training step (its batch fetched, forward, backward, optimizer
    step) as the script measures it (steps 21 to the end; the first 20 warm up), and the
    check's share of it;
  * the steps at which the probe fingerprints the parameters (1, 2, 4, 8...): the time of
    the slowest of them against an ordinary step;
  * the wall time of the whole launch.
Also checks that both runs end with the same weights (the probe must not change the
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


def run(script: Path, steps: int, width: int, out: Path, check: bool) -> tuple[list[float], float]:
    command = [sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2",
               *(["--check"] if check else []), str(script), str(steps), str(width), str(out)]
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
    if check and "no problem found" not in result.stderr:
        sys.exit(f"--check found a problem in a correct job:\n{result.stderr[-3000:]}")
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("TIMES "))
    return json.loads(line[6:]), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "job.py"
        script.write_text(JOB)
        best: dict[bool, tuple[float, float, float]] = {}
        weights = {}
        for check in (False, True):
            rounds = []
            for _ in range(args.repeat):
                out = Path(folder) / f"model-{check}.pt"
                times, wall = run(script, args.steps, args.width, out, check)
                steady = times[20:]
                probed = max(times[i - 1] for i in (1, 2, 4, 8, 16, 32, 64, 128, 256)
                             if i <= len(times))
                rounds.append((sum(steady) / len(steady), probed, wall))
                weights[check] = torch.load(out)
            best[check] = min(rounds)
        same = all(torch.equal(weights[False][k], weights[True][k]) for k in weights[False])
    params = sum(v.numel() for v in weights[False].values())
    print(f"{args.steps} steps of an MLP with {params:,} parameters, 2 CPU processes (gloo), "
          f"best of {args.repeat}:")
    for check in (False, True):
        step, probed, wall = best[check]
        print(f"  {'--check' if check else 'plain  '}  step {step * 1000:7.2f} ms   slowest "
              f"fingerprinted step {probed * 1000:7.2f} ms   launch {wall:5.1f} s")
    plain, checked = best[False][0], best[True][0]
    print(f"  step time with --check: {100 * (checked / plain - 1):+.1f}% (steps 21 to the end)")
    print(f"  same weights with and without --check: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
