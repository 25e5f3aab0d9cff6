"""Defect (the users' notes' own pattern): the script starts its processes itself with
mp.spawn, one per GPU. Launched by distrun, each launched process spawns
torch.cuda.device_count() of its own: none on a machine without GPUs, so nothing trains
and every process exits 0."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(gpu, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=gpu, world_size=world_size)
    model = DDP(nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        optimizer.zero_grad()
        model(torch.randn(16, 8)).sum().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(train, args=(world_size,), nprocs=world_size)
