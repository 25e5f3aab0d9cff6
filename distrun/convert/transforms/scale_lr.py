"""Batch size and learning rate across processes.

Each rank keeps the script's batch size, so the global batch is batch_size x WORLD_SIZE
(the data transform reports it at each loader). With `--scale-lr`, every learning rate
the script sets is multiplied by WORLD_SIZE (the linear scaling rule):
  torch.optim.SGD(model.parameters(), lr=0.1)  ->  ...(model.parameters(), lr=0.1 * WORLD_SIZE)
  torch.optim.Adam(model.parameters())         ->  ...(..., lr=0.001 * WORLD_SIZE)  (its default)
  SGD([{"params": ..., "lr": 0.01}], ...)      ->  each group's own "lr" too
  OneCycleLR(opt, max_lr=0.1) / CyclicLR(opt, base_lr, max_lr)  ->  those rates too (they
                                                  set the learning rate, not the optimizer)
  group["lr"] = rate                           ->  group["lr"] = rate * WORLD_SIZE (a rate
                                                  set by hand; one computed from a group's
                                                  own "lr" is already scaled)
Refused (exit 4, nothing written): no optimizer in the script, or a learning rate that
cannot be read (`**kwargs`, the default of an optimizer from outside torch).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, keyword, positional, walk
from distrun.convert.build import append_keyword, constant, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_optimizer
from distrun.convert.syntax import string_value

# torch.optim's default learning rates (torch 2.13; tests/convert check them)
DEFAULT_LR = {"ASGD": "0.01", "Adadelta": "1.0", "Adafactor": "0.01", "Adagrad": "0.01",
              "Adam": "0.001", "AdamW": "0.001", "Adamax": "0.002", "LBFGS": "1",
              "Muon": "0.001", "NAdam": "0.002", "RAdam": "0.001", "RMSprop": "0.01",
              "Rprop": "0.01", "SGD": "0.001", "SparseAdam": "0.001"}
# schedulers that set the learning rate themselves: the arguments holding rates, and
# their positions after the optimizer
_SCHEDULERS = {"OneCycleLR": (("max_lr", 1),), "CyclicLR": (("base_lr", 1), ("max_lr", 2))}


def plan_scaling(ctx: Context) -> None:
    facts = ctx.facts
    optimizers = [c for c in facts.calls if is_optimizer(facts, c)]
    if not optimizers:
        ctx.refuse(None, "scale_lr.no_lr", "--scale-lr: the script builds no optimizer, so "
                   "there is no learning rate to scale", "leave --scale-lr out, and scale "
                   "the learning rate by hand where the model is updated")
        return
    for call in optimizers:
        _optimizer(ctx, call)
    for call in facts.calls:
        last = (facts.call_name(call) or "").rsplit(".", 1)[-1]
        if (facts.call_name(call) or "").startswith("torch.optim.lr_scheduler.") \
                and last in _SCHEDULERS:
            for name, at in _SCHEDULERS[last]:
                pos = positional(call)
                arg = keyword(call, name) or (pos[at] if len(pos) > at else None)
                if arg is not None:
                    ctx.plan.change(call, "scale_lr.scheduler",
                                    f"`{last}`'s {name} {_scale(ctx, arg.value)}")
    for node in facts.assigns:
        _group_rate(ctx, node)


TRANSFORM = Transform("scale-lr", plan_scaling, lambda ctx: ctx.options.scale_lr)


def _optimizer(ctx: Context, call: cst.Call) -> None:
    facts = ctx.facts
    pos = positional(call)
    lr = keyword(call, "lr") or (pos[1] if len(pos) > 1 else None)
    if pos:
        for group in _groups(ctx, pos[0].value):
            for element in group.elements:
                if isinstance(element, cst.DictElement) and string_value(element.key) == "lr":
                    ctx.plan.change(call, "scale_lr.scaled", "a parameter group's learning "
                                    f"rate {_scale(ctx, element.value)}")
    if lr is not None:
        ctx.plan.change(call, "scale_lr.scaled", f"learning rate {_scale(ctx, lr.value)}")
        return
    name = (facts.call_name(call) or "").rsplit(".", 1)[-1]
    default = DEFAULT_LR.get(name) if (facts.call_name(call) or "").startswith(
        "torch.optim.") else None
    if any(a.star == "**" for a in call.args) or default is None:
        ctx.refuse(call, "scale_lr.unreadable",
                   f"--scale-lr: the learning rate of `{facts.code(call.func)}(...)` cannot "
                   "be read (" + ("it comes from `**` arguments" if default is not None else
                                  "it takes its default, which distrun does not know") + ")",
                   "pass `lr=<rate>` to it explicitly, then convert again")
        return
    world = ctx.names.world_size
    ctx.plan.rewrite(call, lambda n: append_keyword(n, "lr", expression(f"{default} * {world}"))
                     if isinstance(n, cst.Call) else n)
    ctx.plan.change(call, "scale_lr.default_lr", f"{name}'s default learning rate {default} "
                    f"made explicit, x {world} (linear scaling rule)")


def _groups(ctx: Context, arg: cst.BaseExpression) -> list[cst.Dict]:
    """The parameter-group dicts of an optimizer's first argument: a list of dicts
    written there, or assigned once to the name passed."""
    value: cst.BaseExpression | None = arg
    if isinstance(arg, cst.Name):
        values = [a.value for a in ctx.facts.assigns if isinstance(a, cst.Assign)
                  and any(dotted(t.target) == arg.value for t in a.targets)]
        value = values[0] if len(values) == 1 else None
    if isinstance(value, cst.ListComp):
        return [value.elt] if isinstance(value.elt, cst.Dict) else []
    if isinstance(value, (cst.List, cst.Tuple)):
        return [e.value for e in value.elements if isinstance(e.value, cst.Dict)]
    return []


def _scale(ctx: Context, value: cst.BaseExpression) -> str:
    """`value` multiplied by WORLD_SIZE; what the report says of it."""
    world = ctx.names.world_size
    code = ctx.facts.code(value)
    wrapped = code if isinstance(value, (cst.Name, cst.Attribute, cst.Integer, cst.Float,
                                         cst.Call, cst.Subscript)) else f"({code})"
    ctx.plan.rewrite(value, constant(expression(f"{wrapped} * {world}")))
    return f"{code} x {world} (linear scaling rule: the global batch is WORLD_SIZE times larger)"


def _group_rate(ctx: Context, node: cst.CSTNode) -> None:
    """`group["lr"] = rate` sets a rate by hand (a schedule written in the script): scaled
    unless it is computed from a group's own rate, which is scaled already."""
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return
    target = node.targets[0].target
    if not (isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(
            target.slice[0].slice, cst.Index)
            and string_value(target.slice[0].slice.value) == "lr"):
        return
    if _reads_rate(ctx, node.value, node, 0):
        return
    ctx.plan.change(node, "scale_lr.param_group", "the learning rate set by hand in "
                    f"`{ctx.facts.code(target)}`: {_scale(ctx, node.value)}")


def _reads_rate(ctx: Context, expr: cst.CSTNode, at: cst.CSTNode, depth: int) -> bool:
    """Does `expr` read a rate the optimizer holds (`g["lr"]`, `get_last_lr()`), also
    through names assigned in the same function?"""
    facts = ctx.facts
    for node in walk(expr):
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(
                node.slice[0].slice, cst.Index) and string_value(
                node.slice[0].slice.value) in ("lr", "initial_lr"):
            return True
        if isinstance(node, cst.Attribute) and node.attr.value in ("get_last_lr", "get_lr",
                                                                     "param_groups"):
            return True
        if isinstance(node, cst.Name) and depth < 3:
            for assign in facts.assigns:
                if isinstance(assign, cst.Assign) and facts.function(assign) is \
                        facts.function(at) and assign is not at and any(
                        dotted(t.target) == node.value for t in assign.targets) and \
                        _reads_rate(ctx, assign.value, assign, depth + 1):
                    return True
    return False
