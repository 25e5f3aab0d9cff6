"""Full-batch training: whole tensors at every step, nothing to shard (part of the data
transform).

    input = torch.from_numpy(data[3:, :-1])      # made once
    for i in range(steps):
        def closure():
            out = seq(input)                       # the whole set, every step
            ...
        optimizer.step(closure)

With no DataLoader and no batches made or drawn per step, a script whose every training
forward pass reads names bound once (at the top level, or before the loop in the
function that loops; never in a loop; not a parameter of the function that makes the
pass) trains on all of its
data at every step: LBFGS's way (pytorch/examples' time_sequence_prediction), a GCN on
its fixed graph (pygcn). Under DDP every rank then computes the same whole-data
gradient, and their mean is that gradient: the training is the original's, with no
speed-up. That is reported (`data.full_batch`, a warning: the ranks repeat each other's
work) instead of the `data.no_loader` error, which is for batches made by hand where each
rank would train on the same batches as the others while meaning to share them.

Won't: a pass given a slice (`model(x[i:i + bs])`), a name bound in the loop (a batch made
by a function at each step): those stay `data.no_loader`.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.context import Context
from distrun.convert.models import find_models


def full_batch(ctx: Context) -> bool:
    """Report full-batch training, if every training forward pass reads whole data."""
    facts = ctx.facts
    models = ctx.models or find_models(facts, ctx.flow)
    calls = [call for model in models for call in model.forwards]
    if not calls or not all(_whole_data(ctx, call) for call in calls):
        return False
    first = min(calls, key=facts.line)
    ctx.plan.finding(first, "data.full_batch",
                     f"every training forward pass reads whole tensors (`{facts.code(first)}`): "
                     "each step trains on all of the data, so every rank computes the same "
                     "gradient and the training is the original's, with no speed-up",
                     "to share the work, slice the data per rank (`x[RANK::WORLD_SIZE]`) and "
                     "average the loss over the whole global batch")
    return True


def _whole_data(ctx: Context, call: cst.Call) -> bool:
    """Are all of `call`'s arguments names bound once, outside the loops around it?"""
    facts = ctx.facts
    values = [arg.value for arg in call.args]
    if not values or not all(isinstance(v, cst.Name) for v in values):
        return False
    function = facts.function(call)
    params = set(facts.params(function, False)) if function is not None else set()
    loops = list(facts.enclosing_loops(call))
    for value in values:
        assert isinstance(value, cst.Name)
        bindings = [b for b in _bindings(ctx, value.value) if _visible(ctx, b, call)]
        if value.value in params or not bindings:
            return False
        for assign in bindings:
            if any(True for _ in facts.enclosing_loops(assign)):
                return False  # bound anew in a loop: a batch
            scope = facts.function(assign)
            if scope is not None and not any(facts.inside(loop, scope) for loop in loops):
                return False  # bound in a function a loop calls: made at each step
    return True


def _visible(ctx: Context, binding: cst.CSTNode, call: cst.Call) -> bool:
    """Can `binding` be what `call` reads: in its module, at the top level or in a
    function around the call (its own, or one it is nested in)?"""
    facts = ctx.facts
    if facts.module_of(binding) is not facts.module_of(call):
        return False
    scope = facts.function(binding)
    return scope is None or facts.inside(call, scope)


def _bindings(ctx: Context, name: str) -> list[cst.CSTNode]:
    """Every statement of the project that assigns `name` (as a plain name)."""
    found: list[cst.CSTNode] = []
    for assign in ctx.facts.assigns:
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) \
            else [assign.target]
        if any(_binds(t, name) for t in targets):
            found.append(assign)
    for loop in ctx.facts.for_loops:
        if _binds(loop.target, name):
            found.append(loop)
    return found


def _binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds(e.value, name) for e in target.elements)
    return False
