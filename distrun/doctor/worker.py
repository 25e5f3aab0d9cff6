"""One rank of the doctor's smoke test:
`python -m distrun.doctor.worker BACKEND PORT BW WORLD RANK`.

Prints one JSON line: the collectives' results and time, and with BW=1 the all-reduce
bandwidth table (algorithm and bus bandwidth, as nccl-tests reports them)."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24]


def main(backend: str, port: str, bandwidth: str, world_text: str, rank_text: str) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(rank_text), int(world_text)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = port
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    started = time.perf_counter()
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)
    value = torch.tensor([7.0 if rank == 0 else 0.0], device=device)
    dist.broadcast(value, src=0)
    dist.barrier()
    report: dict[str, object] = {"rank": rank, "all_reduce": total.item(),
                                 "broadcast": value.item(),
                                 "seconds": time.perf_counter() - started}
    if bandwidth == "1":
        report["bandwidth"] = _bandwidth(dist, torch, device, world)
    dist.destroy_process_group()
    print(json.dumps(report))


def _bandwidth(dist: object, torch: object, device: object, world: int) -> list[dict[str, float]]:
    rows = []
    for size in SIZES:
        tensor = torch.ones(size // 4, device=device)  # type: ignore[attr-defined]
        iters = max(3, min(50, (1 << 24) // size))
        for _ in range(2):
            dist.all_reduce(tensor)  # type: ignore[attr-defined]
        if device.type == "cuda":  # type: ignore[attr-defined]
            torch.cuda.synchronize()  # type: ignore[attr-defined]
        started = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)  # type: ignore[attr-defined]
        if device.type == "cuda":  # type: ignore[attr-defined]
            torch.cuda.synchronize()  # type: ignore[attr-defined]
        seconds = (time.perf_counter() - started) / iters
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "seconds": seconds, "algbw": algbw,
                     "busbw": algbw * 2 * (world - 1) / world})
    return rows


if __name__ == "__main__":
    main(*sys.argv[1:6])
