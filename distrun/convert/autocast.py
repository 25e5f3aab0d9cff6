"""Mixed precision around a training step, shared by the `--amp` and apex migrations:
the forward pass and loss under `torch.autocast`, the optimizer stepped through a
GradScaler.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import expression, statement, statements, with_block
from distrun.convert.context import Context
from distrun.convert.idioms import is_optimizer, method_name, receiver, statement_assigns
from distrun.convert.transforms.setup import runs_nothing

FP16_ON = "torch.cuda.is_available()"  # fp16 needs CUDA: off on CPU, so scripts still run


@dataclass(frozen=True)
class Mixed:
    """How one training step gets mixed precision."""

    dtype: str  # "float16" | "bfloat16"
    device: str  # expression for the autocast device type
    enabled: str  # expression
    scaler: str | None  # name of the GradScaler, or None (bf16 needs none)


def autocast_forward(ctx: Context, backward_stmt: cst.CSTNode, loss: str, mixed: Mixed) -> bool:
    """Put the statements from the model's forward call to the loss inside autocast;
    False when they cannot be found (reported)."""
    facts, plan = ctx.facts, ctx.plan
    block = facts.parent.get(backward_stmt)
    siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    if backward_stmt not in siblings:
        return False
    index = siblings.index(backward_stmt)  # type: ignore[arg-type]
    loss_at = next((i for i in range(index - 1, -1, -1)
                    if statement_assigns(siblings[i], loss)), None)
    if loss_at is None:
        plan.finding(backward_stmt, "amp.autocast_missed",
                     f"no `{loss} = ...` before the backward in its block: "
                     "the forward pass was not put under autocast",
                     f"wrap the forward pass and loss in `with torch.autocast(\"cuda\", "
                     f"dtype=torch.{mixed.dtype}):`")
        return False
    refs = ctx.model_calls()
    aliases = initialized_models(ctx)
    first = loss_at
    for i in range(loss_at, -1, -1):
        if any(c.func in refs or dotted(c.func) in aliases
               for c in facts.calls_in(siblings[i])):
            first = i
    head = f"torch.autocast({mixed.device}, dtype=torch.{mixed.dtype}, enabled={mixed.enabled})"
    plan.wrap(siblings[first], siblings[loss_at], lambda body: with_block(head, body))
    plan.change(siblings[first], "amp.autocast", f"forward pass and loss under `torch.autocast` "
                f"({mixed.dtype})")
    return True


def scaled_steps(ctx: Context, near: cst.CSTNode, optimizer: str, scaler: str | None) -> None:
    """`optimizer.step()` (in `near`'s scope) -> `scaler.step(optimizer)` + `scaler.update()`."""
    if scaler is None:
        return
    facts, plan = ctx.facts, ctx.plan
    scope = facts.scope(near)
    for call in facts.calls:
        if not (method_name(call) == "step" and receiver(call) == optimizer
                and facts.scope(call) is scope):
            continue
        stmt = facts.statement(call)
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            plan.rewrite(call, lambda _n: expression(f"{scaler}.step({optimizer})"))
            plan.insert_after(stmt, [statement(f"{scaler}.update()\n")])
            plan.change(call, "amp.scaler_step",
                        f"`{optimizer}.step()` -> `{scaler}.step({optimizer})` "
                        f"and `{scaler}.update()`")


def initialized_models(ctx: Context) -> set[str]:
    """Names given to the model by `model_amp, opt = amp.initialize(model, opt, ...)`."""
    facts = ctx.facts
    names = set()
    for call in facts.calls:
        parent = facts.parent.get(call)
        if facts.call_name(call) == "apex.amp.initialize" and isinstance(parent, cst.Assign):
            target = parent.targets[0].target
            first = target.elements[0].value if isinstance(target, (cst.Tuple, cst.List)) \
                else target
            if (code := dotted(first)) is not None:
                names.add(code)
    return names


def place_scaler(ctx: Context, scaler: str, sites: list[cst.CSTNode], enabled: str = FP16_ON
                 ) -> cst.CSTNode | None:
    """Create the GradScaler `scaler` where every site that uses it (a scaled backward,
    a step) can read it: after the optimizer when they all run in its scope; else with
    the set-up block when they are all in the entry script (which sets up); else at the
    top level of each module that uses it (cheap at import, no process group needed).
    The optimizer's statement, if there is one (where the report says it)."""
    facts, plan = ctx.facts, ctx.plan
    create = f'{scaler} = torch.amp.GradScaler("cuda", enabled={enabled})\n'
    anchor = next((facts.statement(c) for c in facts.calls if is_optimizer(facts, c)), None)
    scopes = {facts.scope(site) for site in sites}
    modules = {facts.module_of(site).name: site for site in sites}
    if anchor is not None and scopes == {facts.scope(anchor)}:
        plan.insert_after(anchor, statements(create))
    elif set(modules) == {facts.entry.name} and not runs_nothing(facts.entry.module):
        ctx.setup_lines.append(create)
    else:
        for site in modules.values():
            ctx.need("torch", at=site)
            ctx.define_helper(scaler, site, create)
    return anchor
