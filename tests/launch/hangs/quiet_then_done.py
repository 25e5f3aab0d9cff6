"""Quiet, then done: both ranks sleep without a line of output after a training step
(a long save, a wait on a file system), then finish cleanly."""
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
    print(f"rank {rank} stepped", flush=True)
    time.sleep(float(os.environ.get("QUIET_SECONDS", "8")))
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
