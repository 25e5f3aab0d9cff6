"""The transforms, in the order they run. Each module holds one concern, says in its
docstring what it rewrites and what it won't, and exposes its `Transform`(s).

Order matters: data before the model (accelerate prepares training loaders with the
model), the model before what needs its references (mixed precision, evaluation,
checkpoints), setup last (it places the process group where everything it serves can
see it, and adds the imports the others asked for).
"""

from __future__ import annotations

from distrun.convert.context import Transform
from distrun.convert.transforms import (
    accelerate,
    accumulate,
    agree,
    amp,
    checkpoint,
    data,
    deepspeed,
    device,
    directories,
    download,
    ds_zero3,
    evaluation,
    fsdp,
    hazards,
    loss,
    model,
    output,
    scaling,
    setup,
)

PIPELINE: tuple[Transform, ...] = (
    device.TRANSFORM,
    data.TRANSFORM,
    model.TRANSFORM,
    accelerate.PREPARE_LOADERS,
    evaluation.TRANSFORM,
    loss.TRANSFORM,
    amp.REMOVE,
    amp.TRANSFORM,
    accelerate.BACKWARD,
    deepspeed.TRANSFORM,
    fsdp.TRANSFORM,
    accumulate.TRANSFORM,
    scaling.TRANSFORM,
    checkpoint.TRANSFORM,
    output.TRANSFORM,
    directories.TRANSFORM,
    ds_zero3.TRANSFORM,
    download.TRANSFORM,
    agree.TRANSFORM,
    hazards.TRANSFORM,
    setup.TRANSFORM,
)
