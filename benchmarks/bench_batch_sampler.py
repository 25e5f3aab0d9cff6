"""What sharing a loader's own batch_sampler costs (`RankShareBatchSampler`).

`distrun convert` wraps a training loader's batch_sampler so that rank 0's batch is sent
to every rank at each step (`dist.broadcast_object_list`) and each rank keeps its share.
Measured on 2 CPU processes (gloo, a FileStore), the code the converter generates:

- batches: going through `BatchSampler(RandomSampler(range(N)), B)`, as it is on each
  rank (no communication) and wrapped; the time per batch;
- steps: a DDP training step of an MLP (784-256-10, 204k parameters, SGD) over a
  DataLoader of B/2 per rank, its data sharded by a DistributedSampler, against the same
  with the wrapped batch sampler (a global batch of B, B/2 per rank); the time per step.

Rounds interleave the two ways; the best round of each counts.

Run:  .venv/bin/python benchmarks/bench_batch_sampler.py [--batch 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(rank: int, store: str, batch: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817
    from torch.utils import data

    from distrun.convert.names import Names
    from distrun.convert.transforms.batch_samplers import helper_code

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    space: dict[str, object] = {"torch": torch, "dist": dist}
    exec(helper_code(Names()), space)
    share = space["RankShareBatchSampler"]
    torch.manual_seed(0)
    items = 32 * batch  # 32 steps a pass
    dataset = data.TensorDataset(torch.randn(items, 784), torch.randint(0, 10, (items,)))
    model = DDP(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches(wrapped: bool) -> float:
        sampler = data.BatchSampler(data.RandomSampler(range(64 * items)), batch,
                                    drop_last=True)  # 2,048 batches
        source = share(sampler) if wrapped else sampler  # type: ignore[operator]
        dist.barrier()
        started = time.perf_counter()
        count = sum(1 for _ in source)
        return (time.perf_counter() - started) / count

    def steps(wrapped: bool) -> float:
        if wrapped:
            loader = data.DataLoader(dataset, batch_sampler=share(  # type: ignore[operator]
                data.BatchSampler(data.RandomSampler(dataset), batch, drop_last=True)))
        else:
            loader = data.DataLoader(dataset, batch_size=batch // 2, drop_last=True,
                                     sampler=data.DistributedSampler(dataset))
        dist.barrier()
        started, count = time.perf_counter(), 0
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            count += 1
        return (time.perf_counter() - started) / count

    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, measure in (("batches", batches), ("steps", steps)):
            for wrapped in (False, True):
                key = f"{name} {'wrapped' if wrapped else 'plain'}"
                best[key] = min(best.get(key, float("inf")), measure(wrapped))
    if rank == 0:
        print(json.dumps(best))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        worker(args.rank, args.store, args.batch, args.rounds)
        return
    store = str(Path(tempfile.mkdtemp(prefix="bench-batch-sampler-")) / "store")
    command = [sys.executable, __file__, "--batch", str(args.batch), "--rounds",
               str(args.rounds), "--store", store]
    procs = [subprocess.Popen([*command, "--rank", str(rank)], stdout=subprocess.PIPE,
                              text=True) for rank in (0, 1)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(1)
    best = json.loads(outs[0])
    print(f"2 processes (gloo), global batch {args.batch}, best of {args.rounds} rounds")
    for name, unit, scale in (("batches", "us", 1e6), ("steps", "ms", 1e3)):
        plain, wrapped = best[f"{name} plain"], best[f"{name} wrapped"]
        print(f"{name:<8} plain {plain * scale:9.3f} {unit}   wrapped {wrapped * scale:9.3f} "
              f"{unit}   {(wrapped - plain) * scale:+8.3f} {unit} ({wrapped / plain:.3f}x)")


if __name__ == "__main__":
    main()
