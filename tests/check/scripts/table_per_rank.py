"""Defect: a table shuffled by pandas with numpy's generator, unseeded (each process
seeds it its own way: here by rank), then made into tensors: the DistributedSampler
shards a data set whose rows differ from rank to rank (no Subset, no index list)."""
import gc

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    np.random.seed(1000 + dist.get_rank())  # what separate processes do, unseeded
    table = pd.DataFrame(np.random.RandomState(0).randn(64, 5), columns=list("abcde"))
    table = table.sample(frac=1).reset_index(drop=True)
    data = TensorDataset(torch.tensor(table[list("abcd")].values, dtype=torch.float32),
                         torch.tensor(table["e"].values, dtype=torch.float32)[:, None])
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    torch.manual_seed(0)
    ddp_model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp_model(x), y).backward()
            optimizer.step()
    del ddp_model
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
