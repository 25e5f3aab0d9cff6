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

from collections.abc import Sequence

import libcst as cst

from distrun.convert.analysis import ModuleInfo, dotted
from distrun.convert.build import statements
from distrun.convert.context import Context
from distrun.convert.imports import IMPORTS, bound_name, import_lines
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
    if wanted["device"]:
        lines.append(f'{n.device} = (torch.device("cuda", {n.local_rank}) if '
                     'torch.cuda.is_available() else torch.device("cpu"))\n')
    if ctx.accelerate and n.accelerator in used:
        lines.append(f"{n.accelerator} = Accelerator(\n    cpu=not torch.cuda.is_available(), "
                     f"mixed_precision={_mixed(ctx)},\n)\n")
    helpers = ctx.helper_lines(info)
    if helpers:
        lines.append(helpers)
        used |= {n.dist, n.sampler, "torch"}
    needed = {key for key in IMPORTS if bound_name(key, n) in used}
    if lines:
        needed |= {"os", "torch"} | ({"accelerator"} if ctx.accelerate and
                                     n.accelerator in used else set())
    at = _after_first_imports(tree)
    new = import_lines(_imported(tree.body[:at]), n, needed)
    block = spaced(statements("".join(lines))) if lines else []
    if block:
        block[0] = block[0].with_changes(leading_lines=[
            cst.EmptyLine(indent=False), cst.EmptyLine(comment=cst.Comment(_COMMENT))])
    if not new and not block:
        return tree
    body = list(tree.body)
    return tree.with_changes(body=[*body[:at], *new, *block, *body[at:]])


def _mixed(ctx: Context) -> str:
    return {"fp16": '"fp16" if torch.cuda.is_available() else "no"',
            "bf16": '"bf16"'}.get(ctx.options.amp, '"no"')


def _names(tree: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    tree.visit(Collect())
    return found


def _imported(stmts: Sequence[cst.BaseStatement]) -> dict[str, str]:
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


def _after_first_imports(tree: cst.Module) -> int:
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
