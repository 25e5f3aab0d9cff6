"""The targets a script converts to, one module each (as `launch/backends/` has one per
launcher): `ddp` (plain torch DistributedDataParallel), `accelerate`, `deepspeed` and
`fsdp` (FSDP2). Each is a `context.Target`: the vocabulary the shared transforms ask
for, what it refuses, and its own transforms (see `base.py`).

Adding a target: a module here with a class answering `context.Target`, an entry in
`TARGETS`, its name in `options.Target` and in `--to`'s choices, fixtures in
tests/convert/fixtures/<name>/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from distrun.convert.context import Stage, Target, Transform
from distrun.convert.options import ConvertOptions, read_options, read_words
from distrun.convert.targets.accelerate import Accelerate
from distrun.convert.targets.ddp import DDP
from distrun.convert.targets.deepspeed import DeepSpeed
from distrun.convert.targets.fsdp import FSDP

TARGETS: dict[str, Callable[[], Target]] = {
    "ddp": DDP, "accelerate": Accelerate, "deepspeed": DeepSpeed, "fsdp": FSDP,
}
STAGES: tuple[Stage, ...] = ("prepared", "engine", "late")


def target_for(options: ConvertOptions) -> Target:
    """A fresh target for one conversion (a target may keep what it learns on the way)."""
    return TARGETS[options.target]()


def options_from(given: dict[str, Any]) -> ConvertOptions:
    """`ConvertOptions` from parsed values keyed by field (see `options.read_options`),
    checked by the chosen target. Raises ValueError with the reason."""
    options = read_options(given)
    target_for(options).check_options(options, given)
    return options


def parse_words(words: Sequence[str]) -> ConvertOptions:
    """`["--to", "fsdp", "--amp", "bf16"]` -> checked ConvertOptions, as the command line
    reads them. Raises ValueError on an unknown option, a bad choice or a refusal."""
    return options_from(read_words(words))


def own_transforms() -> list[tuple[str, Transform]]:
    """Every target's own transforms, with the target's name (for tests and docs)."""
    return [(name, t) for name, make in TARGETS.items() for stage in STAGES
            for t in make().transforms(stage)]
