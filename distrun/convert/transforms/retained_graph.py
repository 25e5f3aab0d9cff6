"""Gradients of a second backward pass through a graph kept from the first, averaged by
hand before the step they feed.

DDP averages a model's gradients once per forward pass: the first backward pass through
that forward's graph fires its all-reduce. A script that keeps the graph for another
backward (`lossD.backward(retain_graph=True)` through `fake = gen(noise)`, then
`lossG.backward()` through the same `fake`: aladdinpersson's simple GAN) leaves the
gradients of the second pass on each rank as they are: the ranks step with different
gradients and their weights drift apart (the check's `params-diverged`), with exit 0.
Before each step of such a model's optimizer (after the second pass, with no new forward
pass of the model between the two), its gradients are averaged over the ranks:

    lossG.backward()                ->  lossG.backward()
    opt_gen.step()                      average_gradients(opt_gen)
                                        opt_gen.step()

Averaging is linear and gradients already averaged are the same on every rank, so the
result is the single process's step whatever part DDP averaged before. DDP and
accelerate (which wraps in DDP); DeepSpeed's engine and FSDP2 reduce in their own way:
left alone.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step, receiver
from distrun.convert.syntax import target_names
from distrun.convert.transforms.hand_average import average_before


def plan_retained(ctx: Context) -> None:
    if ctx.target.name not in ("ddp", "accelerate"):
        return
    facts = ctx.facts
    done: set[int] = set()
    for first in facts.calls:
        kept = keyword(first, "retain_graph") if is_backward(first) else None
        if kept is None or isinstance(kept.value, cst.Name) and kept.value.value == "False":
            continue
        loop = next(iter(facts.enclosing_loops(first)), None)
        if loop is None:
            continue
        later = sorted((c for c in facts.calls_in(loop) if is_backward(c)
                        and facts.line(c) > facts.line(first)
                        and facts.function(c) is facts.function(first)), key=facts.line)
        if not later:
            continue
        second = later[0]
        for model in ctx.models:
            optimizer = _bound_name(facts, model.optimizer)
            passes = [f for f in model.forwards if facts.inside(f, loop)]
            lines = [facts.line(f) for f in passes]
            if optimizer is None or not any(_reaches(facts, f, first) for f in passes) or any(
                    facts.line(first) < line < facts.line(second) for line in lines):
                continue
            for step in facts.calls_in(loop):
                if is_optimizer_step(step) and receiver(step) == optimizer \
                        and facts.line(step) > facts.line(second) and id(step) not in done:
                    done.add(id(step))
                    _average_before(ctx, step, optimizer, first, second)


TRANSFORM = Transform("retained_graph", plan_retained)


def _average_before(ctx: Context, step: cst.Call, optimizer: str, first: cst.Call,
                    second: cst.Call) -> None:
    n, facts = ctx.names, ctx.facts
    if average_before(ctx, step, optimizer):
        ctx.plan.change(step, "retained_graph.average",
                        f"`{facts.code(second)}` (line {facts.line(second)}) goes back through "
                        f"the graph `{facts.code(first)}` (line {facts.line(first)}) kept: DDP "
                        "averaged the gradients once, at the first, so the second's are each "
                        f"rank's own; `{n.average_gradients}({optimizer})` averages them "
                        "before the step (else the ranks' weights drift apart)")


def _reaches(facts: Facts, forward: cst.Call, backward: cst.Call) -> bool:
    """Does the output of `forward` flow, undetached, into the loss `backward` starts
    from (through the assignments of their function, before the backward)?"""
    loss = dotted(backward.func.value) if isinstance(backward.func, cst.Attribute) else None
    stmt = facts.statement(forward)
    if loss is None or stmt is None or facts.line(forward) > facts.line(backward):
        return False
    flowing = _assigned(stmt)
    scope = facts.scope(forward)
    assigns = sorted((a for a in facts.assigns if facts.scope(a) is scope
                      and facts.line(forward) < facts.line(a) < facts.line(backward)),
                     key=facts.line)
    for assign in assigns:
        if assign.value is not None and _reads_undetached(assign.value, flowing):
            flowing |= _assigned(assign)
    return loss in flowing


def _assigned(node: cst.CSTNode) -> set[str]:
    """The names (and dotted attributes) `node`'s assignments bind."""
    found: set[str] = set()

    class Visit(cst.CSTVisitor):
        def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
            found.update(target_names(target.target))
            code = dotted(target.target)
            if code is not None:
                found.add(code)

    node.visit(Visit())
    return found


def _reads_undetached(value: cst.BaseExpression, names: set[str]) -> bool:
    found = False

    class Visit(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> bool:
            func = call.func
            return not (isinstance(func, cst.Attribute) and func.attr.value in _CUTS)

        def visit_Name(self, name: cst.Name) -> None:
            nonlocal found
            found = found or name.value in names

    value.visit(Visit())
    return found


_CUTS = {"detach", "detach_", "item", "tolist", "numpy"}


def _bound_name(facts: Facts, made: cst.CSTNode) -> str | None:
    """`opt_gen` of `opt_gen = optim.Adam(...)`."""
    assign = facts.parent.get(made)
    if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
        return dotted(assign.targets[0].target)
    return None
