"""The transforms every target shares, in the order they run, with the stages where
the target's own transforms run (`Target.transforms(stage)`: accelerate prepares the
remaining loaders at "prepared", DeepSpeed and FSDP2 make their engine or shards at
"engine", ZeRO-3 gathers weights at "late"). Each module holds one concern, says in its
docstring what it rewrites and what it won't, and exposes its `Transform`(s).

Order matters: data before the model (accelerate prepares training loaders with the
model), the model before what needs its references (mixed precision, evaluation,
checkpoints), setup last (it places the process group where everything it serves can
see it, and adds the imports the others asked for).
"""

from __future__ import annotations

from distrun.convert.context import Stage, Transform
from distrun.convert.transforms import (
    agreed,
    amp,
    batch_loss,
    checkpoint,
    data,
    device,
    directories,
    download,
    evaluation,
    file_ops,
    grad_accum,
    hazards,
    loss,
    model,
    output,
    rank0_values,
    retained_graph,
    scale_lr,
    setup,
)

PIPELINE: tuple[Transform | Stage, ...] = (
    device.TRANSFORM,
    data.TRANSFORM,
    model.TRANSFORM,
    "prepared",
    evaluation.TRANSFORM,
    evaluation.WHOLE,
    loss.TRANSFORM,
    agreed.TRANSFORM,
    retained_graph.TRANSFORM,
    batch_loss.TRANSFORM,
    amp.REMOVE,
    amp.TRANSFORM,
    "engine",
    grad_accum.TRANSFORM,
    scale_lr.TRANSFORM,
    checkpoint.TRANSFORM,
    output.TRANSFORM,
    directories.TRANSFORM,
    file_ops.TRANSFORM,
    "late",
    download.TRANSFORM,
    rank0_values.TRANSFORM,
    hazards.TRANSFORM,
    setup.TRANSFORM,
)
