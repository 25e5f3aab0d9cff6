"""Gradient accumulation: no gradient all-reduce on the micro-batches that do not step.

With `--grad-accum-no-sync`, where a training loop calls `loss.backward()` on every
micro-batch but steps the optimizer only under a condition:
    loss = criterion(model(x), y) / accum         with (model.no_sync() if not (COND)
    loss.backward()                          ->         else contextlib.nullcontext()):
    if COND:                                         loss = criterion(model(x), y) / accum
        optimizer.step()                             loss.backward()
                                                 if COND: ...
The forward pass goes inside too: DDP decides at forward time whether the next backward
synchronises. With accelerate: `accelerator.no_sync(model)`.

Won't: a condition that reads what the micro-step computes, or a forward pass that is
not in the backward's own block (reported; refused, exit 4, when no loop could take
it). A script that does not accumulate (no step under a condition) is refused: the
option would do nothing.
"""

from __future__ import annotations

from functools import partial

import libcst as cst

from distrun.convert.analysis import Facts, walk
from distrun.convert.build import with_block
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step


def plan_no_sync(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    found = False
    missed: list[tuple[cst.CSTNode, str, str]] = []  # (where, why not, fix)
    for call in facts.calls:
        if not is_backward(call):
            continue
        backward = facts.statement(call)
        if backward is None:
            continue
        block = facts.parent.get(backward)
        if not isinstance(block, cst.IndentedBlock) or backward not in block.body:
            continue
        body = list(block.body)
        index = body.index(backward)
        step_if = next((s for s in body[index + 1:] if isinstance(s, cst.If)
                        and _steps(facts, s)), None)
        if step_if is None:
            continue
        first = index
        model_code = None
        for i in range(index, -1, -1):
            called = [w for c in facts.calls_in(body[i]) if (w := ctx.wrapper_called(c))]
            if called:
                first, model_code = i, called[0]
        if model_code is None:
            missed.append((step_if, "the training forward pass is not in the backward's "
                           "block", "put the forward pass, the backward and the step in one "
                           "block, or skip the all-reduce with `model.no_sync()` yourself"))
            continue
        cond = facts.code(step_if.test)
        assigned = _assigned_names(body[first: index + 1])
        if any(n.value in assigned for n in facts.names if facts.inside(n, step_if.test)):
            missed.append((step_if, "the step condition reads values of the micro-step",
                           "skip the all-reduce with `model.no_sync()` around the non-final "
                           "micro-steps yourself"))
            continue
        sync = ctx.target.no_sync(ctx, model_code)
        nullcontext = f"{ctx.names.contextlib}.nullcontext()"
        head = f"({sync} if not ({cond}) else {nullcontext})"
        plan.wrap(body[first], backward, partial(with_block, head))
        ctx.need("contextlib", at=backward)
        plan.change(body[first], "grad_accum.no_sync",
                    f"micro-steps that do not step the optimizer "
                    f"run under `{sync}`: their gradients are not all-reduced")
        found = True
    if not found and missed:
        where, why, fix = missed[0]
        ctx.refuse(where, "grad_accum.condition", f"--grad-accum-no-sync: {why}: no "
                   "micro-step could skip the all-reduce", f"{fix}; or leave the option out")
    elif not found:
        ctx.refuse(None, "grad_accum.none_found",
                   "--grad-accum-no-sync: no loop steps the optimizer under a condition "
                   "after an unconditional backward: the script does not accumulate "
                   "gradients, so every backward must all-reduce", "leave "
                   "--grad-accum-no-sync out")
    for where, why, fix in missed if found else []:
        plan.finding(where, "grad_accum.condition", f"{why}: no_sync not added", fix)


TRANSFORM = Transform("grad-accum", plan_no_sync, lambda ctx: ctx.options.grad_accum_no_sync)


def _steps(facts: Facts, node: cst.If) -> bool:
    return any(is_optimizer_step(call) for call in facts.calls_in(node.body))


def _assigned_names(stmts: list[cst.BaseStatement]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
                names.add(node.target.value)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(
                    node.target, cst.Name):
                names.add(node.target.value)
    return names

