"""Benchmark the PyTorch DDP tutorial's single_gpu.py converted by distrun against the
tutorial's own hand-written DDP version, multigpu_torchrun.py.

Both come from pytorch/examples, distributed/ddp-tutorial-series, at the same commit:
single_gpu.py and datautils.py as the projects corpus keeps them
(tests/projects/ddp_tutorial_single_gpu/upstream/), multigpu_torchrun.py in
benchmarks/upstream/ddp-tutorial-series/ (provenance: PROVENANCE.md there). No file is
edited. single_gpu.py is converted with `distrun convert single_gpu.py --in-place` (project
mode: datautils.py is read too) in a temporary folder, then both scripts run with
`distrun launch --nproc-per-node 2` on the CPU (gloo), interleaved, `--repeat` times each,
each run in a fresh folder (multigpu_torchrun.py resumes from a snapshot.pt it finds), with
the same per-rank batch (`--batch_size`, per device in both scripts), epochs and
save_every.

The step time is measured from outside the scripts by benchmarks/tutorial_shim/
sitecustomize.py (first on PYTHONPATH in every process): a global optimizer step post-hook
records time.perf_counter() after every step, and rank 0 writes the intervals at exit. A
step's interval is everything between two optimizer steps: the batch fetched, `.to`,
zero_grad, forward, backward (DDP's all-reduce), the step. A run's figure is the median of
its intervals after `--warmup` steps (the median leaves out the few intervals that span an
epoch's end: a print, a checkpoint, the next epoch's iterator). The hand-written script
hard-codes CUDA (`init_process_group(backend="nccl")`, `.to(<int>)`, `device_ids=[...]`):
the same sitecustomize runs it on the CPU (BENCH_TUTORIAL_CPU=1). The converted script gets
the step hook only: it runs on the CPU as it is.

Prints, for both scripts, the median step and the 10th-percentile step (the steps least
disturbed by other processes) of each run, their best and median over the runs, the steps
per run, and the ratio hand-written / converted (goal: at least 0.98, i.e. the converted
script at most 2% slower) of the best runs, of the medians of the runs, and the median of
each round's ratio. Exit 1 if a run fails, or if the two scripts do not make the same
number of steps.

Run:  .venv/bin/python benchmarks/bench_tutorial.py [--repeat 7] [--epochs 50]
                                                    [--batch-size 32] [--warmup 50]
      .venv/bin/python benchmarks/bench_tutorial.py --quick   # 1 run each, 2 epochs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = (ROOT / "tests" / "projects" / "ddp_tutorial_single_gpu" / "upstream" / "distributed"
            / "ddp-tutorial-series")
HAND_WRITTEN = ROOT / "benchmarks" / "upstream" / "ddp-tutorial-series" / "multigpu_torchrun.py"
SHIM = ROOT / "benchmarks" / "tutorial_shim"
DATASET_SIZE = 2048  # MyTrainDataset(2048), hard-coded in both scripts
NPROC = 2
TEARDOWN_ABORT = "terminate called without an active exception"


def prepare(folder: Path) -> dict[str, Path]:
    """The two scripts, each in its own folder beside datautils.py: {name: script}."""
    converted, hand = folder / "converted", folder / "hand_written"
    for target in (converted, hand):
        target.mkdir()
        shutil.copy2(TUTORIAL / "datautils.py", target)
    shutil.copy2(TUTORIAL / "single_gpu.py", converted)
    shutil.copy2(HAND_WRITTEN, hand)
    command = [sys.executable, "-m", "distrun", "convert", "single_gpu.py", "--in-place",
               "--no-backup"]
    result = subprocess.run(command, cwd=converted, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return {"converted": converted / "single_gpu.py",
            "hand-written": hand / "multigpu_torchrun.py"}


def run(name: str, script: Path, args: list[str], folder: Path, index: int) -> list[float]:
    """One launch of `script` in a fresh folder; the step intervals of rank 0 (seconds)."""
    times = folder / f"times-{name}-{index}.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SHIM), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env["BENCH_TUTORIAL_TIMES"] = str(times)
    env.pop("BENCH_TUTORIAL_CPU", None)
    if name == "hand-written":
        env["BENCH_TUTORIAL_CPU"] = "1"
    command = [sys.executable, "-m", "distrun", "launch", "--nproc-per-node", str(NPROC),
               str(script), *args]
    attempt = 0
    while True:
        workdir = folder / f"run-{name}-{index}-{attempt}"
        workdir.mkdir()
        times.unlink(missing_ok=True)
        result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
        attempt += 1
        # torch's gloo sometimes aborts a rank at exit, after the training (see
        # bench_check.py): such a run is run again, twice at most
        if result.returncode == 0 or TEARDOWN_ABORT not in result.stderr or attempt == 3:
            break
        print(f"  (a rank aborted at exit: {TEARDOWN_ABORT!r}; run again)")
    if result.returncode != 0:
        sys.exit(f"{name}: {' '.join(command)} failed ({result.returncode}):\n"
                 f"{result.stderr[-3000:]}")
    if not times.exists():
        sys.exit(f"{name}: rank 0 recorded no optimizer step\n{result.stderr[-3000:]}")
    intervals: list[float] = json.loads(times.read_text())
    return intervals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs of each script")
    parser.add_argument("--epochs", type=int, default=50, help="32 steps each at batch 32")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank, both scripts")
    parser.add_argument("--warmup", type=int, default=50, help="steps left out of each run")
    parser.add_argument("--quick", action="store_true",
                        help="1 run each, 2 epochs, 5 warm-up steps: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.epochs, args.warmup = 1, 2, 5
    steps = args.epochs * math.ceil(DATASET_SIZE / NPROC / args.batch_size)
    if steps - 1 <= args.warmup:
        sys.exit(f"{steps} steps per run: no step left after --warmup {args.warmup}")
    # total_epochs, save_every (= total_epochs: one checkpoint, after epoch 0), batch
    script_args = [str(args.epochs), str(args.epochs), "--batch_size", str(args.batch_size)]

    # per script, per run: the median step and the 10th-percentile step
    figures: dict[str, list[tuple[float, float]]] = {"converted": [], "hand-written": []}
    counts: dict[str, set[int]] = {"converted": set(), "hand-written": set()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_tutorial-") as tmp:
        folder = Path(tmp)
        scripts = prepare(folder)
        for index in range(args.repeat):
            # interleaved, the order swapped every round: a slow spell of a busy machine
            # falls on both
            order = ["converted", "hand-written"]
            for name in order if index % 2 == 0 else order[::-1]:
                intervals = run(name, scripts[name], script_args, folder, index)
                counts[name].add(len(intervals) + 1)
                steady = intervals[args.warmup:]
                median, p10 = statistics.median(steady), statistics.quantiles(steady, n=10)[0]
                figures[name].append((median, p10))
                print(f"  run {index + 1}/{args.repeat} {name:12}  median step "
                      f"{median * 1e3:.3f} ms   p10 {p10 * 1e3:.3f} ms")
    wall = time.perf_counter() - started

    print(f"PyTorch DDP tutorial (pytorch/examples distributed/ddp-tutorial-series): "
          f"{NPROC} CPU processes (gloo), batch {args.batch_size} per rank, {args.epochs} "
          f"epochs = {steps} steps per rank, steps after {args.warmup} warm-up steps, "
          f"{args.repeat} run(s) each ({wall:.0f} s); best and median of the runs:")
    summary: dict[tuple[str, int], tuple[float, float]] = {}
    for name, label in (("converted", "single_gpu.py converted by distrun"),
                        ("hand-written", "multigpu_torchrun.py (hand-written DDP)")):
        for which in (0, 1):
            runs = [run_figures[which] for run_figures in figures[name]]
            summary[name, which] = (min(runs), statistics.median(runs))
        (best, middle), (best10, middle10) = summary[name, 0], summary[name, 1]
        print(f"  {label:40}  median step {best * 1e3:.3f} / {middle * 1e3:.3f} ms   "
              f"p10 step {best10 * 1e3:.3f} / {middle10 * 1e3:.3f} ms   "
              f"steps {sorted(counts[name])}")
    for which, what in ((0, "median step"), (1, "p10 step   ")):
        hand, conv = summary["hand-written", which], summary["converted", which]
        # each round's two runs are neighbours in time: their ratio cancels slow load drift
        paired = statistics.median(h[which] / c[which] for h, c in
                                   zip(figures["hand-written"], figures["converted"], strict=True))
        print(f"  hand-written / converted, {what}: {hand[0] / conv[0]:.3f}x (best runs), "
              f"{hand[1] / conv[1]:.3f}x (median of runs), {paired:.3f}x (median of the "
              f"rounds' ratios)   goal >= 0.98x")
    if counts["converted"] != {steps} or counts["hand-written"] != {steps}:
        sys.exit(f"steps per run: expected {steps}, converted {sorted(counts['converted'])}, "
                 f"hand-written {sorted(counts['hand-written'])}")


if __name__ == "__main__":
    main()
