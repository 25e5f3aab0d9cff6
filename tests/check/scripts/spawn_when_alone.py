"""Look-alike of spawn_in_script.py, correct: it spawns its processes only when no
launcher started it (no LOCAL_RANK in the environment); under a launcher each process
trains as one rank of the launcher's group."""
import gc
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    for _ in range(4):
        optimizer.zero_grad()
        ddp_model(torch.randn(16, 8)).sum().backward()
        optimizer.step()
    del ddp_model
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit
    dist.destroy_process_group()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        mp.spawn(train, args=(2,), nprocs=2)
