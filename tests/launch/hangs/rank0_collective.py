"""Hangs: an evaluation on rank 0 only that all-reduces; rank 1 waits in the barrier
after it (a different collective at the same point)."""
import gc

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model):
    loss = torch.tensor([model.weight.sum().item()])
    dist.all_reduce(loss)  # every rank must call it, but only rank 0 does
    return loss.item()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    print(f"rank {rank} trained", flush=True)
    if rank == 0:
        print("eval", evaluate(model.module), flush=True)
    dist.barrier()
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
