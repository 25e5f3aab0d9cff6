"""A memory of the batch's items kept across steps (a MoCo queue of negatives, a memory
bank), filled from every rank's batch (part of the batch_loss transform).

    queue = queue_data(queue, k)         ->  queue = queue_data(queue, gather_rows(k))
    bank = torch.cat([bank, z.detach()])  ->  bank = torch.cat([bank, gather_rows(z.detach())])

The single process puts every key of its batch into the memory; each rank now sees its
own share, and its memory would hold only its own keys: fewer negatives, other ones
(peisuke/MomentumContrast.pytorch). The new rows are gathered from every rank first, rank
0's first (what MoCo's own distributed code does, `concat_all_gather`), so every rank
holds the whole batch's keys. A collective: every rank makes the same updates (the same
number of batches, as DistributedSampler gives).

Taken: `Q = torch.cat([Q, X], ...)` (or a function of the project returning
`torch.cat([first, second], ...)` called with Q first), in a loop over data, where X is
detached (`.detach()`, or a name assigned so) and made from the batch. Not taken: X with
gradients (an accumulator of the training graph), a memory that is not the target
itself.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, walk
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.names import Names
from distrun.convert.transforms.batch_sums import memory_rows


def memory_sites(ctx: Context) -> list[tuple[cst.Assign, cst.BaseExpression]]:
    """The updates of memories kept across steps, and the new rows of each."""
    facts = ctx.facts
    found = []
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        memory = dotted(assign.targets[0].target)
        new = _new_rows(ctx, assign.value, memory) if memory else None
        if new is not None and _detached(facts, new, assign) and memory_rows(
                facts, assign, new):
            found.append((assign, new))
    return found


def gather_memories(ctx: Context) -> None:
    facts, n = ctx.facts, ctx.names
    for assign, new in memory_sites(ctx):
        memory = dotted(assign.targets[0].target)
        ctx.need("torch", "dist", at=assign)
        ctx.define_helper("gather_rows", assign, helper_code(n))
        ctx.plan.rewrite(new, lambda node: expression(f"{n.gather_rows}({code_of(node)})"))
        ctx.plan.change(assign, "batch_loss.memory", f"`{memory}` keeps the batch's items "
                        f"across steps (a queue, a memory bank): `{facts.code(new)}` is "
                        "gathered from every rank before it is added, so every rank's "
                        "memory holds the whole batch's, as on one process")


def _new_rows(ctx: Context, value: cst.BaseExpression, memory: str
              ) -> cst.BaseExpression | None:
    """In `torch.cat([memory, X])` or `f(memory, X)` (f returning `torch.cat([a, b])`):
    X."""
    facts = ctx.facts
    if isinstance(value, cst.Subscript):  # `torch.cat([bank, z])[-size:]`: the newest kept
        value = value.value
    if not isinstance(value, cst.Call):
        return None
    if facts.call_name(value) == "torch.cat":
        parts = value.args[0].value if value.args else None
        if isinstance(parts, (cst.List, cst.Tuple)) and len(parts.elements) == 2 and \
                dotted(parts.elements[0].value) == memory:
            return parts.elements[1].value
        return None
    callee = ctx.flow.callee(value)
    args = [a for a in value.args if a.keyword is None]
    if callee is None or len(args) < 2 or dotted(args[0].value) != memory:
        return None
    func, is_method = callee
    params = facts.params(func, is_method)
    for ret in facts.returns:
        if ret.value is None or facts.function(ret) is not func or not isinstance(
                ret.value, cst.Call) or facts.call_name(ret.value) != "torch.cat":
            continue
        parts = ret.value.args[0].value if ret.value.args else None
        if isinstance(parts, (cst.List, cst.Tuple)) and len(parts.elements) == 2 and \
                params[:2] == [dotted(e.value) for e in parts.elements]:
            return args[1].value
    return None


def _detached(facts: Facts, new: cst.BaseExpression, assign: cst.Assign) -> bool:
    """`k.detach()`, or a name last assigned `... .detach()` in the same scope."""
    if isinstance(new, cst.Call) and isinstance(new.func, cst.Attribute) and \
            new.func.attr.value == "detach":
        return True
    name = dotted(new)
    scope = facts.scope(assign)
    return name is not None and any(
        isinstance(a, cst.Assign) and facts.scope(a) is scope and facts.line(a) <
        facts.line(assign) and any(dotted(t.target) == name for t in a.targets) and
        isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Attribute) and
        a.value.func.attr.value == "detach" for a in facts.assigns) and not any(
        isinstance(node, cst.Name) and node.value == "requires_grad_" for node in walk(scope))


def helper_code(n: Names) -> str:
    return f'''

def {n.gather_rows}(rows):
    """distrun: the rows of `rows` from every rank, rank 0's first (new items of a memory
    kept across steps, a queue of negatives: every rank's memory gets the whole batch's,
    as on one process)."""
    if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
        return rows
    every = [torch.empty_like(rows) for _ in range({n.dist}.get_world_size())]
    {n.dist}.all_gather(every, rows.contiguous())
    return torch.cat(every)
'''
