"""What the user asked `distrun convert` to do beyond the plain DDP rewrite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Amp = Literal["keep", "fp16", "bf16", "none"]
Target = Literal["ddp", "accelerate"]


@dataclass(frozen=True)
class ConvertOptions:
    target: Target = "ddp"  # plain torch DDP, or Hugging Face accelerate
    amp: Amp = "keep"  # keep: leave mixed precision as it is (deprecated forms modernised)
    sync_bn: bool = False  # BatchNorm -> SyncBatchNorm on GPU
    scale_lr: bool = False  # learning rate x WORLD_SIZE (linear scaling rule)
    grad_accum_no_sync: bool = False  # no all-reduce on micro-steps that do not step
    eval_shard: bool = False  # shard evaluation loaders, all-reduce the loop's sums
