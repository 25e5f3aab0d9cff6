"""Defect: under DeepSpeed ZeRO-3 each rank holds a shard of every parameter, and
`model.state_dict()` gives empty tensors (shape (0,)): saved as is, the file holds no
weights. With FULL_STATE=1 the parameters are gathered first (the look-alike)."""
import gc
import os

import deepspeed
import torch
import torch.distributed as dist
import torch.nn as nn

CONFIG = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
          "zero_allow_untested_optimizer": True}


def main():
    deepspeed.init_distributed("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    engine = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                  config=CONFIG)[0]
    torch.manual_seed(1 + dist.get_rank())
    for _ in range(3):
        loss = engine(torch.randn(16, 8)).sum()
        engine.backward(loss)
        engine.step()
    if os.environ.get("FULL_STATE") == "1":
        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            state = {k: v.clone() for k, v in model.state_dict().items()}
    else:
        state = model.state_dict()
    if dist.get_rank() == 0:
        torch.save(state, os.environ.get("OUT_PATH", "model.pt"))
    del engine
    gc.collect()


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
