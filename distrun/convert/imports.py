"""The imports a converted script may need: one table, written once, in this order.

Transforms say which they need (`ctx.need("ddp")`); the setup transform adds the
lines, each under the name `Names` chose for it, and skips those the script already
imports exactly so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import statements
from distrun.convert.names import Names


@dataclass(frozen=True)
class Import:
    qualified: str  # what the bound name denotes
    template: str  # the import line; {name} is the name it binds
    name_attr: str | None  # the `Names` attribute holding that name (None: fixed)


IMPORTS: dict[str, Import] = {
    "contextlib": Import("contextlib", "import contextlib as {name}", "contextlib"),
    "itertools": Import("itertools", "import itertools as {name}", "itertools"),
    "copy": Import("copy", "import copy as {name}", "copy"),
    "gc": Import("gc", "import gc as {name}", "gc"),
    "os": Import("os", "import os as {name}", "os"),
    "torch": Import("torch", "import torch", None),
    "numpy": Import("numpy", "import numpy", None),
    "random": Import("random", "import random", None),
    "sys": Import("sys", "import sys", None),
    "dist": Import("torch.distributed", "import torch.distributed as {name}", "dist"),
    "ddp": Import("torch.nn.parallel.DistributedDataParallel",
                  "from torch.nn.parallel import DistributedDataParallel as {name}", "ddp"),
    "sampler": Import("torch.utils.data.distributed.DistributedSampler",
                      "from torch.utils.data.distributed import DistributedSampler as {name}",
                      "sampler"),
    "accelerator": Import("accelerate.Accelerator", "from accelerate import Accelerator", None),
    "deepspeed": Import("deepspeed", "import deepspeed", None),
    **{name: Import(f"{module}.{name}", f"from {module} import {name}", None)
       for module, names in (
           ("torch.distributed.fsdp", ("fully_shard", "MixedPrecisionPolicy",
                                       "register_fsdp_forward_method")),
           ("torch.distributed.checkpoint.state_dict", (
               "StateDictOptions", "get_model_state_dict", "get_optimizer_state_dict",
               "set_model_state_dict", "set_optimizer_state_dict")))
       for name in names},  # FSDP2 (--to fsdp)
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


def imported_by(stmts: Sequence[cst.BaseStatement]) -> dict[str, str]:
    """local name -> qualified name of the plain imports among `stmts`."""
    found: dict[str, str] = {}
    for stmt in stmts:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = dotted(alias.name) or ""
                    local = alias.asname.name if alias.asname else None
                    key = local.value if isinstance(local, cst.Name) else full.split(".")[0]
                    found[key] = full if isinstance(local, cst.Name) else key
            elif isinstance(small, cst.ImportFrom) and not small.relative and small.module \
                    and not isinstance(small.names, cst.ImportStar):
                base = dotted(small.module) or ""
                for alias in small.names:
                    name = dotted(alias.name) or ""
                    local = alias.asname.name if alias.asname else None
                    found[local.value if isinstance(local, cst.Name) else name] = f"{base}.{name}"
    return found


def after_first_imports(tree: cst.Module) -> int:
    """The index after the module's first run of imports (after its docstring and
    `from __future__` lines when it has no import)."""
    at = 0
    seen_import = False
    for i, stmt in enumerate(tree.body):
        if _is_docstring(stmt) and i == 0:
            at = 1
            continue
        if _is_import(stmt):
            seen_import = True
            at = i + 1
            continue
        if seen_import or not _is_import(stmt):
            break
    return at


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))
