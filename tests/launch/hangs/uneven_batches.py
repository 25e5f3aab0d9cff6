"""Hangs: rank 1 has one more batch than rank 0 (data split by hand, unevenly): its last
backward waits for rank 0's gradients, while rank 0 has left the loop and waits in the
barrier after it."""
import gc

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(8, 4) for _ in range(3 + rank)]
    for x in batches:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    print(f"rank {rank} trained {len(batches)} batches", flush=True)
    dist.barrier()
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
