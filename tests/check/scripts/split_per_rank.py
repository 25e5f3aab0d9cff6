"""Defect: the train/validation split is drawn with numpy's unseeded generator, so each
rank draws its own: one rank's validation samples are another's training samples."""
import gc

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(80, 8), torch.randint(0, 3, (80,)))
    order = np.random.permutation(len(data))
    train_set, val_set = Subset(data, order[:64]), Subset(data, order[64:])
    sampler = DistributedSampler(train_set, shuffle=True)
    loader = DataLoader(train_set, batch_size=16, sampler=sampler)
    model = nn.Linear(8, 3)
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp_model(x), y).backward()
            optimizer.step()
    if rank == 0:
        x, y = val_set[:]
        print(f"validation loss {nn.functional.cross_entropy(model(x), y).item():.4f}")
    del ddp_model
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
