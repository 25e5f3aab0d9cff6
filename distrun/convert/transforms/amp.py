"""Mixed precision: deprecated forms modernised, NVIDIA apex migrated, `--amp` added or
removed.

Always:
  torch.cuda.amp.autocast(...)     ->  torch.autocast("cuda", ...)
  torch.cuda.amp.GradScaler(...)   ->  torch.amp.GradScaler("cuda", ...)
  apex amp                         ->  torch.autocast + torch.amp.GradScaler (see apex.py)
With `--amp fp16|bf16` on a script without mixed precision: autocast around each
training forward pass and its loss (bf16 also on CPU), and a GradScaler for fp16
(enabled with CUDA only, so converted scripts still run on CPU).
With `--amp none`: autocast blocks become their bodies and the GradScaler goes.

Won't: migrate apex inside a script that is already distributed (left as it is), or
find a forward pass that is not in the backward's own block (reported with the fix).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.autocast import FP16_ON, Mixed, autocast_forward, place_scaler, scaled_steps
from distrun.convert.build import code_of, constant, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step, receiver
from distrun.convert.transforms.apex import migrate_apex

_DEPRECATED = {
    "torch.cuda.amp.autocast": 'torch.autocast("cuda"',
    "torch.cuda.amp.autocast_mode.autocast": 'torch.autocast("cuda"',
    "torch.cuda.amp.GradScaler": 'torch.amp.GradScaler("cuda"',
    "torch.cuda.amp.grad_scaler.GradScaler": 'torch.amp.GradScaler("cuda"',
}


def plan_amp(ctx: Context) -> None:
    _modernise(ctx)
    migrated = migrate_apex(ctx)
    if not ctx.target.adds_autocast:
        return  # with accelerate, --amp is the Accelerator's mixed_precision
    amp = ctx.options.amp
    if not migrated and amp in ("fp16", "bf16") and not _has_autocast(ctx):
        _add_amp(ctx, amp)


def _modernise(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    for call in facts.calls:
        name = facts.call_name(call) or ""
        new = _DEPRECATED.get(name)
        if new is None:
            continue
        args = ", ".join(facts.code(a) for a in call.args)
        plan.rewrite(call, constant(expression(f"{new}{', ' + args if args else ''})")))
        plan.change(call, "amp.modernise", f"deprecated `{facts.code(call.func)}(...)` -> "
                    f"`{new.split('(')[0]}(\"cuda\", ...)`")
    _drop_cuda_amp_imports(ctx)


def _drop_cuda_amp_imports(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    for stmt in facts.import_statements():
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and dotted(small.module or cst.Name("x")) in (
                    "torch.cuda.amp",):
                plan.remove(small)
                plan.change(stmt, "amp.modernise",
                            "import from the deprecated torch.cuda.amp removed")


def _has_autocast(ctx: Context) -> bool:
    return any((ctx.facts.call_name(c) or "").endswith("autocast") for c in ctx.facts.calls)


def _add_amp(ctx: Context, amp: str) -> None:
    facts, plan = ctx.facts, ctx.plan
    dtype = "float16" if amp == "fp16" else "bfloat16"
    scaler = ctx.names.fresh("scaler") if amp == "fp16" else None
    device = f"{ctx.names.device}.type"
    enabled = FP16_ON if amp == "fp16" else "True"
    mixed = Mixed(dtype, device, enabled, scaler)
    done = False
    sites: list[cst.CSTNode] = []
    for call in facts.calls:
        if not is_backward(call):
            continue
        stmt = facts.statement(call)
        loss = receiver(call)
        if loss is None or not isinstance(stmt, cst.SimpleStatementLine):
            continue
        autocast_forward(ctx, stmt, loss, mixed)
        sites.append(stmt)
        if scaler is not None:
            assert isinstance(call.func, cst.Attribute)
            plan.rewrite(call.func.value, lambda n: expression(f"{scaler}.scale({code_of(n)})"))
            optimizer = _optimizer_near(ctx, stmt)
            if optimizer:
                scaled_steps(ctx, stmt, optimizer, scaler)
        done = True
    if scaler is not None and done:
        anchor = place_scaler(ctx, scaler, sites)
        plan.change(anchor or facts.entry.module, "amp.grad_scaler",
                    f"`{scaler} = torch.amp.GradScaler(\"cuda\")` for fp16 (enabled with "
                    "CUDA only)")
    if not done:
        plan.finding(None, "amp.no_backward",
                     f"--amp {amp}: no `loss.backward()` found to put under autocast",
                     "wrap the forward pass in `torch.autocast` yourself")


def _optimizer_near(ctx: Context, stmt: cst.CSTNode) -> str | None:
    """The optimizer stepped in `stmt`'s scope (the first one)."""
    scope = ctx.facts.scope(stmt)
    for call in ctx.facts.calls:
        if is_optimizer_step(call) and ctx.facts.scope(call) is scope:
            return receiver(call)
    return None


TRANSFORM = Transform("amp", plan_amp, lambda ctx: ctx.options.amp != "none"
                      and ctx.target.precision_owner(ctx.options) is None)


_AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
             "torch.cpu.amp.autocast", "torch.amp.autocast_mode.autocast")
_SCALERS = ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler")


def remove_amp(ctx: Context) -> None:
    """`--amp none`: autocast blocks become their bodies; the GradScaler goes:
    scaler.scale(loss).backward() -> loss.backward(), scaler.step(opt) -> opt.step(),
    scaler.update() / scaler.unscale_(opt) removed."""
    facts, plan = ctx.facts, ctx.plan
    why = ctx.target.precision_owner(ctx.options) or "--amp none"
    scalers: set[str] = set()
    _drop_cuda_amp_imports(ctx)
    for call in facts.calls:
        name = facts.call_name(call) or ""
        parent = facts.parent.get(call)
        if name in _AUTOCAST and isinstance(parent, cst.WithItem):
            with_stmt = facts.parent.get(parent)
            if isinstance(with_stmt, cst.With) and len(with_stmt.items) == 1:
                plan.rewrite(with_stmt, _unwrap_with)
                plan.change(with_stmt, "amp.remove_autocast",
                            f"autocast removed ({why}): full precision")
        elif name in _SCALERS and isinstance(parent, cst.Assign):
            scalers |= {c for t in parent.targets if (c := dotted(t.target))}
            plan.remove(parent)
            plan.change(call, "amp.remove_scaler", f"GradScaler removed ({why})")
    for call in facts.calls:
        func = call.func
        if not isinstance(func, cst.Attribute):
            continue
        owner, attr = dotted(func.value), func.attr.value
        if owner in scalers and attr in ("update", "unscale_"):
            stmt = facts.statement(call)
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                plan.rewrite(stmt, constant(cst.RemoveFromParent()))
        elif owner in scalers and attr == "step" and call.args:
            plan.rewrite(call, constant(expression(f"{facts.code(call.args[0].value)}.step()")))
        elif owner in scalers and attr == "scale" and call.args:
            plan.rewrite(call, constant(call.args[0].value.deep_clone()))
        elif owner in scalers:
            plan.finding(call, "amp.scaler_leftover",
                         f"`{owner}.{attr}` kept, but the GradScaler is gone",
                         "remove the GradScaler's state from checkpoints")


# DeepSpeed: mixed precision is the config's (`--amp` sets it there); FSDP2 --amp bf16:
# its MixedPrecisionPolicy.
REMOVE = Transform("amp-none", remove_amp, lambda ctx: ctx.options.amp == "none"
                   or ctx.target.precision_owner(ctx.options) is not None)


def _unwrap_with(node: cst.CSTNode) -> cst.FlattenSentinel[cst.BaseStatement]:
    """The `with` block's statements in its place: the comments above it, on its line and
    above its first statement stay above that statement (the plan keeps the block's
    footer comments); a one-line `with ...: a; b` becomes the line `a; b`."""
    assert isinstance(node, cst.With)
    suite = node.body
    body: list[cst.BaseStatement]
    on_its_line: list[cst.EmptyLine] = []
    if isinstance(suite, cst.IndentedBlock):
        body = list(suite.body)
        if suite.header.comment is not None:
            on_its_line.append(cst.EmptyLine(comment=suite.header.comment))
    else:
        assert isinstance(suite, cst.SimpleStatementSuite)
        body = [cst.SimpleStatementLine(body=suite.body,
                                        trailing_whitespace=suite.trailing_whitespace)]
    first = body[0]
    assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    body[0] = first.with_changes(
        leading_lines=[*node.leading_lines, *on_its_line, *first.leading_lines])
    return cst.FlattenSentinel(body)
