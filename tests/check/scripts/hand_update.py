"""Defect: parameters updated by hand (no optimizer) on a model that is not wrapped in DDP,
each rank on its own shard: the ranks' weights drift apart with exit 0. With SYNCED=1 the
forward goes through DDP (its gradients averaged): correct, and the check stays clean."""
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
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    forward = DDP(model) if os.environ.get("SYNCED") == "1" else model
    learning_rate = 0.05
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            model.zero_grad()
            loss = nn.functional.cross_entropy(forward(x), y)
            loss.backward()
            for p in model.parameters():  # no optimizer: the tutorials' update by hand
                p.data.add_(p.grad.data, alpha=-learning_rate)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), os.environ.get("OUT_PATH", "model.pt"))


if __name__ == "__main__":
    main()
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit
    dist.destroy_process_group()
