"""The imports a converted script may need: one table, written once, in this order.

Transforms say which they need (`ctx.need("ddp")`); the setup transform adds the
lines, each under the name `Names` chose for it, and skips those the script already
imports exactly so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import libcst as cst

from distrun.convert.build import statements
from distrun.convert.names import Names


@dataclass(frozen=True)
class Import:
    qualified: str  # what the bound name denotes
    template: str  # the import line; {name} is the name it binds
    name_attr: str | None  # the `Names` attribute holding that name (None: fixed)


IMPORTS: dict[str, Import] = {
    "contextlib": Import("contextlib", "import contextlib as {name}", "contextlib"),
    "gc": Import("gc", "import gc as {name}", "gc"),
    "os": Import("os", "import os as {name}", "os"),
    "torch": Import("torch", "import torch", None),
    "dist": Import("torch.distributed", "import torch.distributed as {name}", "dist"),
    "ddp": Import("torch.nn.parallel.DistributedDataParallel",
                  "from torch.nn.parallel import DistributedDataParallel as {name}", "ddp"),
    "sampler": Import("torch.utils.data.distributed.DistributedSampler",
                      "from torch.utils.data.distributed import DistributedSampler as {name}",
                      "sampler"),
    "accelerator": Import("accelerate.Accelerator", "from accelerate import Accelerator", None),
}


def bound_name(key: str, names: Names) -> str:
    entry = IMPORTS[key]
    if entry.name_attr is None:
        return entry.qualified.rsplit(".", 1)[-1]
    name: str = getattr(names, entry.name_attr)
    return name


def import_lines(present: Mapping[str, str], names: Names, needed: Iterable[str]
                 ) -> list[cst.BaseStatement]:
    """The import statements for `needed`, in the table's order, minus those `present`
    (local name -> qualified name) already makes."""
    wanted = set(needed)
    lines = []
    for key, entry in IMPORTS.items():
        if key not in wanted:
            continue
        name = bound_name(key, names)
        if present.get(name) == entry.qualified:
            continue
        line = entry.template.format(name=name)
        if line.endswith(f" as {entry.qualified.rsplit('.', 1)[-1]}"):
            line = line.rsplit(" as ", 1)[0]
        lines.append(line + "\n")
    return statements("".join(lines)) if lines else []
