"""Run by test_deepspeed_config.py and test_deepspeed_types.py in a world of one: each
config of a JSON list given to deepspeed.initialize (a Linear model, two steps); what
happened, as JSON on stdout."""

from __future__ import annotations

import json
import logging
import os
import sys
import time

os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=sys.argv[2])

import deepspeed  # noqa: E402
import torch  # noqa: E402

logging.getLogger("DeepSpeed").setLevel(logging.ERROR)


def run(config: object) -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
        for _ in range(2):
            dtype = next(engine.module.parameters()).dtype  # bf16/fp16: the model's
            engine.backward(engine(torch.randn(4, 4).to(dtype)).float().sum())
            engine.step()
    except Exception as err:  # what DeepSpeed does with the config is the result
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:300]}
    zero = engine._config.zero_config
    return {"ok": True, "bf16": engine.bfloat16_enabled(), "clip": engine.gradient_clipping(),
            "reduce_bucket_size": engine.zero_reduce_bucket_size(),
            "fp16": engine.fp16_enabled(), "stage": engine.zero_optimization_stage(),
            "offload": str(zero.offload_optimizer.device) if zero.offload_optimizer else None,
            "allow_untested": engine.zero_allow_untested_optimizer(),
            "lr": engine.get_lr()[0] if engine.lr_scheduler is not None else None}


cases = json.loads(open(sys.argv[1]).read())
results = {}
for name, config in cases.items():
    start = time.monotonic()
    results[name] = {**run(config), "seconds": round(time.monotonic() - start, 2)}
print("RESULTS " + json.dumps(results))
