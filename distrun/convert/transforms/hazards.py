"""Hazards: what cannot be converted mechanically becomes a finding with the fix.

Finds: BatchNorm layers (SyncBatchNorm on GPU), IterableDataset (a DistributedSampler cannot shard
it), CUDA_VISIBLE_DEVICES set inside the script, full-batch optimizers (LBFGS).
Rewrites nothing.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.context import Context, Transform
from distrun.convert.idioms import ITERABLE_DATASET


def plan_hazards(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    batchnorm_seen = False
    for call in facts.calls:
        name = facts.call_name(call) or ""
        last = name.rsplit(".", 1)[-1]
        if last in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d") and not batchnorm_seen \
                and not ctx.options.sync_bn:  # --sync-bn: the change says what was done
            batchnorm_seen = True
            plan.finding(call, "hazards.batchnorm",
                         "BatchNorm computes statistics per rank: with small "
                         "per-rank batches results differ from one process",
                         "convert with --sync-bn: on GPU the model's BatchNorm layers become "
                         f"SyncBatchNorm before {ctx.target.wrap_call} (SyncBatchNorm does "
                         "not run on CPU)")
        if name == "torch.optim.LBFGS":
            plan.finding(call, "hazards.full_batch",
                         "LBFGS usually trains on the full batch: sharding "
                         "the data changes its steps", "check that each step's loss is a mean "
                         "over the whole global batch")
    for cls in facts.classes():
        for base in cls.bases:
            if facts.qualname(base.value) in ITERABLE_DATASET:
                plan.finding(cls, "hazards.iterable_dataset", f"`{cls.name.value}` is an "
                             "IterableDataset: DistributedSampler cannot shard it, so every "
                             "rank would read the same items",
                             "in __iter__, keep every WORLD_SIZE-th item: "
                             "`itertools.islice(items, RANK, None, WORLD_SIZE)`")
    for node in facts.strings:
        if node.evaluated_value == "CUDA_VISIBLE_DEVICES":
            parent = facts.parent.get(facts.parent.get(node, node), node)
            if isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index)):
                plan.finding(node, "hazards.cuda_visible_devices",
                             "the script sets CUDA_VISIBLE_DEVICES: every rank "
                             "would see the same GPUs", "remove it; torchrun gives each rank "
                             "its own LOCAL_RANK")


TRANSFORM = Transform("hazards", plan_hazards)
