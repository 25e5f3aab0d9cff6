"""Defect seen only after the default check's window: 12 batches an epoch, and the
sampler's epoch is never set, so the second epoch (from step 13) repeats the first's
order. The default check (steps 1 to 8) cannot see it; --check does. The script also
prints, after its last step, whether the probe's per-step hooks are still in place."""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.optimizer import _global_optimizer_post_hooks
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 8), torch.randint(0, 3, (96,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = nn.Linear(8, 3)
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp_model(x), y).backward()
            optimizer.step()
    if rank == 0:
        hooks = [type(h).__module__ + "." + h.__name__
                 for h in _global_optimizer_post_hooks.values()]
        print(f"optimizer hooks: {hooks}")
        print(f"loader methods: {DataLoader.__iter__.__module__} "
              f"{_BaseDataLoaderIter.__next__.__module__}")
        torch.save(model.state_dict(), os.environ.get("OUT_PATH", "model.pt"))
    del ddp_model
    gc.collect()  # free DDP's finished communication first: gloo can abort at exit


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
