"""Defect: two models of one class in one optimizer (CycleGAN's generators over
itertools.chain), the first trained through the module inside DDP (no gradient sync),
the second through its DDP object. Their parameters have the same names in their own
modules: the check must tell them apart to see the first one drift."""
import gc
import itertools
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
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    g_ab, g_ba = nn.Linear(8, 8), nn.Linear(8, 8)
    ddp_ab, ddp_ba = DDP(g_ab), DDP(g_ba)
    optimizer = torch.optim.SGD(itertools.chain(g_ab.parameters(), g_ba.parameters()), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for a, b in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(g_ab(a), b) + nn.functional.mse_loss(ddp_ba(b), a)
            loss.backward()
            optimizer.step()
    if dist.get_rank() == 0:
        torch.save(g_ab.state_dict(), os.environ.get("OUT_PATH", "model.pt"))
    del ddp_ab


if __name__ == "__main__":
    main()
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit
    dist.destroy_process_group()
