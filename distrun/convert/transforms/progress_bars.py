"""Progress bars (tqdm) shown by rank 0 only (part of the output transform).

    for x, y in tqdm(loader):               ->  for x, y in tqdm(loader, disable=RANK != 0):

A bar whose state the script reads (`pbar.n`, `pbar.total`, `pbar.format_dict`: the
number of batches seen, divided by) must go on counting on every rank: a disabled bar
counts nothing, and `loss / pbar.n` divides by zero on every rank but rank 0
(ikostrikov/pytorch-flows' validation). Such a bar writes to the null device instead:

    pbar = tqdm(total=n)                    ->  pbar = tqdm(total=n, file=None if RANK == 0
                                                            else open(os.devnull, "w"))
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, walk
from distrun.convert.build import append_keyword, code_of, expression
from distrun.convert.context import Context

# what a bar does for its display alone: nothing read back
_DISPLAY = frozenset({"update", "set_description", "set_description_str", "set_postfix",
                      "set_postfix_str", "close", "write", "refresh", "reset", "clear",
                      "display", "unpause", "moveto"})


def disable_bar(ctx: Context, call: cst.Call) -> None:
    rank = ctx.names.rank
    if _state_read(ctx.facts, call):
        ctx.need("os", at=call)
        null = f"open({ctx.names.os}.devnull, \"w\")"
        existing = keyword(call, "file")

        def to_null(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.Call)
            if existing is not None:
                return node.with_changes(args=[
                    a.with_changes(value=expression(
                        f"({code_of(a.value)}) if {rank} == 0 else {null}"))
                    if a.keyword is not None and a.keyword.value == "file" else a
                    for a in node.args])
            return append_keyword(node, "file", expression(f"None if {rank} == 0 else {null}"))

        ctx.plan.rewrite(call, to_null)
        ctx.plan.change(call, "output.progress_bar", "progress bar shown on rank 0 only; "
                        "the script reads its count, so on the other ranks it goes on "
                        "counting, written to the null device")
        return
    existing = keyword(call, "disable")

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        if existing is not None:
            args = [
                a.with_changes(value=expression(f"({code_of(a.value)}) or {rank} != 0"))
                if a.keyword is not None and a.keyword.value == "disable" else a
                for a in node.args
            ]
            return node.with_changes(args=args)
        return append_keyword(node, "disable", expression(f"{rank} != 0"))

    ctx.plan.rewrite(call, rewrite)
    ctx.plan.change(call, "output.progress_bar", "progress bar shown on rank 0 only")


def _state_read(facts: Facts, call: cst.Call) -> bool:
    """Is the bar `call` makes bound to a name (`pbar = tqdm(...)`, `with tqdm(...) as
    pbar`) whose attributes other than its display methods are read in its scope?"""
    parent = facts.parent.get(call)
    name = None
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        name = dotted(parent.targets[0].target)
    elif isinstance(parent, cst.WithItem) and parent.asname is not None:
        name = dotted(parent.asname.name)
    if name is None:
        return False
    scope = facts.scope(call)
    return any(isinstance(node, cst.Attribute) and dotted(node.value) == name
               and node.attr.value not in _DISPLAY and facts.scope(node) is scope
               for node in walk(scope))
