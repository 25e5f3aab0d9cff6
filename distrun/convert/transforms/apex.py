"""NVIDIA apex, whose `amp` module was removed in 2025, migrated to torch (part of the
mixed-precision transform):

  model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
                                   ->  scaler = torch.amp.GradScaler("cuda", enabled=...)
  the forward pass and loss before the backward -> inside `with torch.autocast(...)`
  with amp.scale_loss(loss, optimizer) as scaled: scaled.backward()
                                   ->  scaler.scale(loss).backward()
  optimizer.step()                 ->  scaler.step(optimizer); scaler.update()
  amp.state_dict() / amp.load_state_dict(x) -> scaler.state_dict() / scaler.load_state_dict(x)
  apex.parallel.convert_syncbn_model(m) -> torch's SyncBatchNorm (on GPU only)
  every apex import                ->  removed

Opt levels: O0 fp32 (scaler disabled), O1/O2 fp16 autocast + scaler, O3 also a half
model (reported). fp16 is enabled only with CUDA, so converted scripts run on CPU.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional, string_value
from distrun.convert.autocast import FP16_ON, Mixed, autocast_forward, place_scaler, scaled_steps
from distrun.convert.build import code_of, constant, expression, keep_leading_lines, statements
from distrun.convert.context import Context

_APEX_AMP = frozenset({"apex.amp.initialize", "apex.amp.scale_loss"})


def uses_apex(facts: Facts) -> bool:
    """Does the script scale its loss with apex amp?"""
    return any(facts.call_name(c) in _APEX_AMP for c in facts.calls)


def migrate_apex(ctx: Context, want: str = "keep", why: str = "--amp none") -> bool:
    """Migrate apex amp; True if the script used it (its mixed precision is then set).
    `want`: "keep" (apex's opt level), "fp16", "bf16" (bfloat16 autocast, the GradScaler
    disabled), or "off" (no autocast, the GradScaler disabled: --amp none, or the target
    sets the precision: `why`)."""
    facts, plan = ctx.facts, ctx.plan
    inits = [c for c in facts.calls if facts.call_name(c) == "apex.amp.initialize"]
    scale_withs = [c for c in facts.calls if facts.call_name(c) == "apex.amp.scale_loss"]
    if not inits and not scale_withs:
        _migrate_syncbn(ctx)
        _drop_apex_imports(ctx)
        return False
    scaler = ctx.names.fresh("scaler")
    if inits and facts.enclosing_class(inits[0]) is not None:
        scaler = "self.scaler"  # the methods that scale the loss find it on the object
    elif inits:
        home = facts.function(inits[0])
        elsewhere = [c for c in scale_withs if facts.function(c) is not home]
        if elsewhere:
            plan.finding(elsewhere[0], "amp.apex_scaler_scope",
                         f"the loss is scaled outside the function that "
                         f"creates `{scaler}`", f"pass `{scaler}` to this function, or make it "
                         "a global")
    level = "O1"  # scale_loss without initialize: apex's default level
    for call in inits:
        level = _migrate_initialize(ctx, call, scaler, want, why)
    if not inits:
        _create_scaler(ctx, scaler, scale_withs, want, why)
    mixed: Mixed | None = None  # "off": no autocast
    if want == "bf16":
        mixed = Mixed("bfloat16", f"{ctx.names.device}.type", "True", scaler)
    elif want != "off":
        mixed = Mixed("float16", '"cuda"', _scaler_on(level, want), scaler)
    for call in scale_withs:
        _migrate_scale_loss(ctx, call, mixed, scaler)
    _migrate_syncbn(ctx)
    for call in facts.calls:
        name = facts.call_name(call)
        if name in ("apex.amp.state_dict", "apex.amp.load_state_dict"):
            method = name.rsplit(".", 1)[1]
            plan.rewrite(call.func, constant(expression(f"{scaler}.{method}")))
            plan.change(call, "amp.apex_state",
                        f"`amp.{method}` -> `{scaler}.{method}` (the GradScaler's "
                        "state)")
    _drop_apex_imports(ctx)
    ctx.need("torch", at=inits[0] if inits else scale_withs[0])
    return True


def _scaler_on(level: str, want: str) -> str:
    """Whether the GradScaler that replaces apex scales (an expression)."""
    if want in ("off", "bf16"):
        return "False"
    return FP16_ON if want == "fp16" or level != "O0" else "False"


def _precision_said(level: str, want: str, why: str) -> str:
    return {"off": f"disabled, its calls pass through: {why}",
            "bf16": "disabled: --amp bf16 autocasts in bfloat16, which needs no loss "
                    "scaling; its calls pass through",
            "fp16": "fp16 on GPU (--amp fp16" + ("; apex's O0 was fp32)" if level == "O0"
                                                 else ")"),
            }.get(want, "disabled: O0 is fp32" if level == "O0" else "fp16 on GPU")


def _migrate_initialize(ctx: Context, call: cst.Call, scaler: str, want: str, why: str) -> str:
    """`amp.initialize(...)` -> a GradScaler; returns the opt level."""
    facts, plan = ctx.facts, ctx.plan
    opt = keyword(call, "opt_level")
    level = (string_value(opt.value) if opt else None) or "O1"
    enabled = _scaler_on(level, want)
    stmt = facts.statement(call)
    new = [f'{scaler} = torch.amp.GradScaler("cuda", enabled={enabled})\n']
    assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    if isinstance(assign, cst.Assign):
        targets = facts.code(assign.targets[0].target)
        sources = ", ".join(facts.code(a.value) for a in positional(call))
        if targets.replace(" ", "").strip("()") != sources.replace(" ", ""):
            new.insert(0, f"{targets} = {sources}\n")
    if level == "O3" and want not in ("off", "bf16"):
        plan.finding(call, "amp.apex_o3", "opt_level O3 (a pure fp16 model) became fp16 autocast "
                     "with fp32 weights, like O1/O2: halving a model after its DDP wrap "
                     "breaks DDP", "if you need pure fp16, call `model.half()` before the "
                     "DDP wrap")
    if stmt is not None:
        plan.rewrite(stmt, keep_leading_lines(statements("".join(new))))
    plan.change(call, "amp.apex_initialize", f"apex `amp.initialize(opt_level=\"{level}\")` -> "
                f"`torch.amp.GradScaler` ({_precision_said(level, want, why)})")
    return level


def _create_scaler(ctx: Context, scaler: str, scale_withs: list[cst.Call], want: str,
                   why: str) -> None:
    """No `amp.initialize` here (another module initialised apex): the GradScaler that
    replaces it is created after the optimizer when the loss is scaled in its scope, else
    with the setup block."""
    plan = ctx.plan
    place_scaler(ctx, scaler, list(scale_withs), _scaler_on("O1", want))
    plan.finding(scale_withs[0], "amp.apex_scale_loss_alone",
                 "apex `amp.scale_loss` without `amp.initialize` in "
                 f"this script: `{scaler} = torch.amp.GradScaler(\"cuda\")` was created for "
                 f"it, as opt level O1 ({_precision_said('O1', want, why)})", "if apex ran at "
                 "another opt level, set the GradScaler and autocast to match",
                 severity="info")


def _drop_apex_imports(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    for stmt in facts.import_statements():
        for small in stmt.body:
            module = dotted(small.module) if isinstance(small, cst.ImportFrom) and small.module \
                else None
            names = [dotted(a.name) for a in small.names] if isinstance(small, cst.Import) \
                else []
            if (module or "").split(".")[0] == "apex" or any((n or "").split(".")[0] == "apex"
                                                             for n in names):
                plan.remove(small)
                plan.change(stmt, "amp.apex_import", "apex import removed: torch replaces it")


def _migrate_syncbn(ctx: Context) -> None:
    """apex.parallel.convert_syncbn_model(m) -> torch's SyncBatchNorm, on GPU only."""
    facts, plan = ctx.facts, ctx.plan
    for call in facts.calls:
        if facts.call_name(call) != "apex.parallel.convert_syncbn_model" or not call.args:
            continue
        model = facts.code(call.args[0].value)
        plan.rewrite(call, constant(expression(
            f"(torch.nn.SyncBatchNorm.convert_sync_batchnorm({model}) "
            f"if torch.cuda.is_available() else {model})")))
        plan.change(call, "amp.apex_syncbn", "apex `convert_syncbn_model` -> "
                    "`torch.nn.SyncBatchNorm.convert_sync_batchnorm` (GPU only: SyncBatchNorm "
                    "does not run on CPU)")


def _migrate_scale_loss(ctx: Context, call: cst.Call, mixed: Mixed | None, scaler: str
                        ) -> None:
    facts, plan = ctx.facts, ctx.plan
    args = positional(call)
    with_stmt = facts.statement(call)
    if not isinstance(with_stmt, cst.With) or len(args) < 2:
        plan.finding(call, "amp.apex_scale_loss_outside_with",
                     "amp.scale_loss outside a `with` statement: not migrated",
                     f"use `{scaler}.scale(loss).backward()`")
        return
    loss, optimizer = facts.code(args[0].value), facts.code(args[1].value)
    item = with_stmt.items[0]
    alias = dotted(item.asname.name) if item.asname else None

    def rewrite(node: cst.CSTNode) -> cst.FlattenSentinel[cst.BaseStatement]:
        assert isinstance(node, cst.With)
        body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
        code = "".join(code_of(s) for s in body)
        if alias:
            code = code.replace(f"{alias}.", f"{scaler}.scale({loss}).")
        new = statements(code or f"{scaler}.scale({loss}).backward()\n")
        return cst.FlattenSentinel([new[0].with_changes(leading_lines=node.leading_lines),
                                    *new[1:]])

    plan.rewrite(with_stmt, rewrite)
    plan.change(with_stmt, "amp.apex_scale_loss",
                f"`with amp.scale_loss(...)` -> `{scaler}.scale({loss})`")
    if mixed is not None:
        autocast_forward(ctx, with_stmt, loss, mixed)
    scaled_steps(ctx, with_stmt, optimizer, scaler)
