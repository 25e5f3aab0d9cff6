"""Batch size and learning rate across processes.

Each rank keeps the script's batch size, so the global batch is batch_size x WORLD_SIZE
(the data transform reports it at each loader). With `--scale-lr`, the optimizer's
learning rate is multiplied by WORLD_SIZE (the linear scaling rule):
  torch.optim.SGD(model.parameters(), lr=0.1)  ->  ...(model.parameters(), lr=0.1 * WORLD_SIZE)
Won't: scale a learning rate the optimizer takes by default (reported).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import keyword, positional
from distrun.convert.build import constant, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_optimizer


def plan_scaling(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    world = ctx.names.world_size
    for call in facts.calls:
        if not is_optimizer(facts, call):
            continue
        lr = keyword(call, "lr")
        pos = positional(call)
        value = lr.value if lr is not None else (pos[1].value if len(pos) > 1 else None)
        if value is None:
            plan.finding(call, "scale_lr.default_lr",
                         "this optimizer uses its default learning rate: "
                         "not scaled", f"pass lr=<rate> * {world}")
            continue
        code = facts.code(value)
        wrapped = code if isinstance(value, (cst.Name, cst.Attribute, cst.Integer, cst.Float,
                                             cst.Call, cst.Subscript)) else f"({code})"
        plan.rewrite(value, constant(expression(f"{wrapped} * {world}")))
        plan.change(call, "scale_lr.scaled",
                    f"learning rate {code} x {world} (linear scaling rule: "
                    "the global batch is WORLD_SIZE times larger)")


TRANSFORM = Transform("scale-lr", plan_scaling, lambda ctx: ctx.options.scale_lr)
