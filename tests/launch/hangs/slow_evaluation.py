"""Slow, not hung: rank 0 computes silently for a while (a long evaluation) while rank 1
waits for it in a barrier; then both go on and finish."""
import gc
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    print(f"rank {rank} starts", flush=True)
    if rank == 0:
        end = time.monotonic() + float(os.environ.get("EVAL_SECONDS", "12"))
        x = torch.randn(64, 64)
        while time.monotonic() < end:  # computing, without a line of output
            x = torch.tanh(x @ x)
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
