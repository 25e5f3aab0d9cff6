"""Defect: under FSDP2 `model.state_dict()` holds DTensors, each rank only its shard;
saved as is, the file does not load into the plain model ("mixed torch.Tensor and
DTensor"). With FULL_STATE=1 the full state dict is gathered first (the look-alike that
must stay clean)."""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + dist.get_rank())
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(16, 8)).sum().backward()
        optimizer.step()
    if os.environ.get("FULL_STATE") == "1":
        state = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        state = model.state_dict()
    if dist.get_rank() == 0:
        torch.save(state, os.environ.get("OUT_PATH", "model.pt"))
    del model, optimizer
    gc.collect()  # free the finished communication first: gloo can abort at exit


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
