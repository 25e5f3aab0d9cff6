"""The other modules of a project: what they need once their code is converted.

Only the entry script (the one `distrun launch` runs) sets up the process group. A
module it imports that the conversion changed gets just the names its new code uses:
the imports of the table in `imports.py`, and this process's place in the job read
from the environment, cheap and safe at import time (no process group, nothing
started: DataLoader workers that import it stay harmless):

    LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))
    RANK = int(os.environ.get("RANK", 0))
    WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))
    DEVICE = torch.device("cuda", LOCAL_RANK) if torch.cuda.is_available() else ...

They go at the end of the module's first block of imports, before any code that could
use them.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import ModuleInfo
from distrun.convert.build import statements
from distrun.convert.context import Context
from distrun.convert.imports import (
    IMPORTS,
    after_first_imports,
    bound_name,
    import_lines,
    imported_by,
)
from distrun.convert.transforms.setup import spaced

_COMMENT = ("# distrun: this process's place in the job (torchrun sets the variables; "
            "the entry script starts the process group)")


def complete(ctx: Context, info: ModuleInfo, tree: cst.Module) -> cst.Module:
    """`tree` (the converted module `info`) with the imports and names its code uses."""
    used = {node.value for node in _names(tree)}
    n = ctx.names
    lines = []
    wanted = {"device": n.device in used, "world_size": n.world_size in used,
              "rank": n.rank in used}
    wanted["local_rank"] = n.local_rank in used or wanted["device"]
    if wanted["local_rank"]:
        lines.append(f'{n.local_rank} = int({n.os}.environ.get("LOCAL_RANK", 0))\n')
    if wanted["rank"]:
        lines.append(f'{n.rank} = int({n.os}.environ.get("RANK", 0))\n')
    if wanted["world_size"]:
        lines.append(f'{n.world_size} = int({n.os}.environ.get("WORLD_SIZE", 1))\n')
    if wanted["device"] and ctx.on_cpu:  # the project trains on the CPU
        lines.append(f'{n.device} = torch.device("cpu")\n')
    elif wanted["device"]:
        lines.append(f'{n.device} = (torch.device("cuda", {n.local_rank}) if '
                     'torch.cuda.is_available() else torch.device("cpu"))\n')
    own, own_imports = ctx.target.module_lines(ctx, used)
    if own:
        lines.append(own)
    helpers = ctx.helper_lines(info)
    if helpers:
        lines.append(helpers)
        used |= {node.value for node in _names(cst.parse_module(helpers))}
    needed = {key for key in IMPORTS if bound_name(key, n) in used}
    if lines:
        needed |= {"os", "torch"} | own_imports
    at = after_first_imports(tree)
    new = import_lines(imported_by(tree.body[:at]), n, needed)
    block = spaced(statements("".join(lines))) if lines else []
    if block:
        block[0] = block[0].with_changes(leading_lines=[
            cst.EmptyLine(indent=False), cst.EmptyLine(comment=cst.Comment(_COMMENT))])
    if not new and not block:
        return tree
    body = list(tree.body)
    return tree.with_changes(body=[*body[:at], *new, *block, *body[at:]])


def _names(tree: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    tree.visit(Collect())
    return found
