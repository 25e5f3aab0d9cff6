"""Look-alike of split_per_rank.py, correct: each rank takes its own part of the data on
purpose (Subsets that differ by rank and do not overlap), and the optimizer steps stay in
step through DDP."""
import gc

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    share = len(data) // world
    mine = Subset(data, range(rank * share, (rank + 1) * share))
    loader = DataLoader(mine, batch_size=16, shuffle=False)
    model = nn.Linear(8, 3)
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp_model(x), y).backward()
            optimizer.step()
    del ddp_model
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
