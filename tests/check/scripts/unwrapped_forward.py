"""Defect: the training forward pass goes through the module inside DDP (no gradient sync)."""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=int(os.environ.get("BATCH_SIZE", 16)), sampler=sampler)
    model = nn.Linear(8, 3)
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    if rank == 0:
        torch.save(model.state_dict(), os.environ.get("OUT_PATH", "model.pt"))


if __name__ == "__main__":
    main()
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit
    dist.destroy_process_group()
