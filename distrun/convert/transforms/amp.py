"""Mixed precision: deprecated forms modernised, NVIDIA apex migrated, `--amp` added,
changed or removed.

Always:
  torch.cuda.amp.autocast(...)     ->  torch.autocast("cuda", ...)
  torch.cuda.amp.GradScaler(...)   ->  torch.amp.GradScaler("cuda", ...)
  apex amp                         ->  torch.autocast + torch.amp.GradScaler (see apex.py)
With `--amp fp16|bf16` on a script without mixed precision: autocast around each
training forward pass and its loss (bf16 also on CPU), and a GradScaler for fp16
(enabled with CUDA only, so converted scripts still run on CPU).
With `--amp fp16|bf16` on a script that autocasts already: each autocast runs in the
dtype asked for (`dtype=` set where it differs or depends on the device); bf16 drops
the GradScaler (no loss scaling needed), fp16 adds one where there is none. apex
becomes the dtype asked for (bf16: its GradScaler disabled, so its calls and its state
in checkpoints keep working). What already matches is said in the report.
With `--amp none` (or a target that sets the precision itself): autocast blocks become
their bodies, other autocasts and GradScalers are disabled (`enabled=False`), the
GradScaler assigned to a name goes, apex becomes a disabled GradScaler.

Won't: migrate apex inside a script that is already distributed (left as it is), or
find a forward pass that is not in the backward's own block (reported with the fix).
"""

from __future__ import annotations

from functools import partial

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.autocast import FP16_ON, Mixed, autocast_forward, place_scaler, scaled_steps
from distrun.convert.build import code_of, constant, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step, receiver
from distrun.convert.precision import (
    DTYPES,
    autocast_dtype,
    autocasts,
    dtype_setter,
    scalers,
    set_argument,
)
from distrun.convert.transforms.apex import migrate_apex, uses_apex

_DEPRECATED = {
    "torch.cuda.amp.autocast": 'torch.autocast("cuda"',
    "torch.cuda.amp.autocast_mode.autocast": 'torch.autocast("cuda"',
    "torch.cuda.amp.GradScaler": 'torch.amp.GradScaler("cuda"',
    "torch.cuda.amp.grad_scaler.GradScaler": 'torch.amp.GradScaler("cuda"',
}


def plan_amp(ctx: Context) -> None:
    amp = ctx.options.amp
    adds = ctx.target.adds_autocast  # with accelerate, --amp is the Accelerator's
    facts = ctx.facts
    if ctx.on_cpu and amp == "fp16":
        ctx.refuse(None, "amp.fp16_on_cpu", "--amp fp16: the script trains on the CPU (it "
                   "names no GPU and no device), and float16 autocast with its GradScaler "
                   "runs on CUDA: the option would change nothing, or fail on a GPU machine",
                   "use --amp bf16 (autocast on the CPU), or move the model and each batch "
                   "to a device in the script first (`model.to(device)`, `x.to(device)`)")
        return
    retarget = adds and amp in DTYPES and not uses_apex(facts) and bool(
        autocasts(facts) or scalers(facts))
    dropped = set(scalers(facts)) if retarget and amp == "bf16" else set()
    _modernise(ctx, dropped)
    migrated = migrate_apex(ctx, amp if adds else "keep")
    if not adds:
        return
    if retarget:
        _retarget(ctx, amp)
    elif not migrated and amp in DTYPES:
        _add_amp(ctx, amp)


def _modernise(ctx: Context, skip: set[cst.Call]) -> None:
    facts, plan = ctx.facts, ctx.plan
    for call in facts.calls:
        name = facts.call_name(call) or ""
        new = _DEPRECATED.get(name)
        if new is None or call in skip:
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


def _retarget(ctx: Context, amp: str) -> None:
    """`--amp fp16|bf16` on a script that has mixed precision already: each autocast in
    the dtype asked for, a GradScaler for fp16 only."""
    facts, plan = ctx.facts, ctx.plan
    want = DTYPES[amp]
    changed = False
    found = autocasts(facts)
    for call in found:
        have = autocast_dtype(facts, call)
        if have == want:
            continue
        plan.rewrite(call, dtype_setter(facts, call, want))
        ctx.need("torch", at=call)
        was = f"in {have}" if have else "in a dtype decided at run time (the device's default)"
        plan.change(call, "amp.dtype", f"autocast {was} -> `dtype=torch.{want}` (--amp {amp})")
        changed = True
    kept = scalers(facts)
    if amp == "bf16" and kept:
        remove_scalers(ctx, "--amp bf16: bfloat16 needs no loss scaling")
        changed = True
    elif amp == "fp16" and not kept:
        changed = _scale_backwards(ctx, amp) or changed
    if not found:
        plan.finding(kept[0], "amp.autocast_missed", f"--amp {amp}: the script has a "
                     "GradScaler but no autocast: no forward pass was put under autocast",
                     f"wrap the forward pass and loss in `with torch.autocast(DEVICE.type, "
                     f"dtype=torch.{want})`")
    elif not changed:
        plan.finding(found[0], "amp.already", f"--amp {amp}: the script already autocasts "
                     f"in {want}" + (" with a GradScaler" if amp == "fp16" else "") +
                     ": kept as it is", severity="info")


def _add_amp(ctx: Context, amp: str) -> None:
    facts = ctx.facts
    dtype = DTYPES[amp]
    device = f"{ctx.names.device}.type"
    enabled = FP16_ON if amp == "fp16" else "True"
    mixed = Mixed(dtype, device, enabled, None)
    sites: list[cst.CSTNode] = []
    done = False
    for call in facts.calls:
        if not is_backward(call):
            continue
        stmt = facts.statement(call)
        loss = receiver(call)
        if loss is None or not isinstance(stmt, cst.SimpleStatementLine):
            continue
        sites.append(stmt)
        done = autocast_forward(ctx, stmt, loss, mixed) or done
    if done and amp == "fp16":
        _scale_backwards(ctx, amp)
    if not done:  # the option would do nothing
        ctx.refuse(sites[0] if sites else None, "amp.no_backward", f"--amp {amp}: " + (
            "no training forward pass and loss could be put under autocast (none is "
            "assigned in the block of its `loss.backward()`)" if sites else
            "no `loss.backward()` of a named loss found to put under autocast"),
            f"wrap the forward pass and loss in `torch.autocast(DEVICE.type, "
            f"dtype=torch.{dtype})` yourself, or leave --amp out")


def _scale_backwards(ctx: Context, amp: str) -> bool:
    """A GradScaler for fp16: each `loss.backward()` scaled, each step of its optimizer
    through the scaler. False when no backward could take it."""
    facts, plan = ctx.facts, ctx.plan
    scaler = ctx.names.fresh("scaler")
    sites: list[cst.CSTNode] = []
    for call in facts.calls:
        stmt = facts.statement(call)
        if not is_backward(call) or receiver(call) is None \
                or not isinstance(stmt, cst.SimpleStatementLine):
            continue
        assert isinstance(call.func, cst.Attribute)
        plan.rewrite(call.func.value, lambda n: expression(f"{scaler}.scale({code_of(n)})"))
        optimizer = _optimizer_near(ctx, stmt)
        if optimizer:
            scaled_steps(ctx, stmt, optimizer, scaler)
        sites.append(stmt)
    if not sites:
        plan.finding(None, "amp.no_backward", f"--amp {amp}: no `loss.backward()` found to "
                     "scale with a GradScaler", "add `scaler = torch.amp.GradScaler(\"cuda\")`"
                     " and scale the loss yourself")
        return False
    anchor = place_scaler(ctx, scaler, sites)
    plan.change(anchor or facts.entry.module, "amp.grad_scaler",
                f"`{scaler} = torch.amp.GradScaler(\"cuda\")` for fp16 (enabled with "
                "CUDA only)")
    return True


def _optimizer_near(ctx: Context, stmt: cst.CSTNode) -> str | None:
    """The optimizer stepped in `stmt`'s scope (the first one)."""
    scope = ctx.facts.scope(stmt)
    for call in ctx.facts.calls:
        if is_optimizer_step(call) and ctx.facts.scope(call) is scope:
            return receiver(call)
    return None


TRANSFORM = Transform("amp", plan_amp, lambda ctx: ctx.options.amp != "none"
                      and ctx.target.precision_owner(ctx.options) is None)


# torch.autocast(device_type, dtype, enabled); the torch.cuda/cpu forms (enabled, ...)
_ENABLED_AT = {"torch.autocast": 2, "torch.amp.autocast": 2, "torch.amp.autocast_mode.autocast": 2}
# GradScaler(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)
_SCALER_ENABLED_AT = {"torch.amp.GradScaler": 5, "torch.amp.grad_scaler.GradScaler": 5}


def remove_amp(ctx: Context) -> None:
    """`--amp none` (or the target sets the precision): autocast blocks become their
    bodies, any other autocast gets `enabled=False`; the GradScaler goes (see
    `remove_scalers`); apex becomes a disabled GradScaler."""
    facts, plan = ctx.facts, ctx.plan
    owner = ctx.target.precision_owner(ctx.options)
    why = owner or "--amp none"
    _drop_cuda_amp_imports(ctx)
    found = bool(autocasts(facts))
    for call in autocasts(facts):
        parent = facts.parent.get(call)
        with_stmt = facts.parent.get(parent) if isinstance(parent, cst.WithItem) else None
        if isinstance(with_stmt, cst.With) and len(with_stmt.items) == 1:
            plan.rewrite(with_stmt, _unwrap_with)
            plan.change(with_stmt, "amp.remove_autocast",
                        f"autocast removed ({why}): full precision")
            continue
        at = _ENABLED_AT.get(facts.call_name(call) or "", 0)
        plan.rewrite(call, partial(set_argument, name="enabled", code="False", position=at))
        plan.change(call, "amp.remove_autocast", f"autocast disabled with `enabled=False` "
                    f"({why}; it is not a `with` block of its own): full precision")
    found = remove_scalers(ctx, why) or found
    found = migrate_apex(ctx, "off", why) or found
    if not found and owner is None:
        plan.finding(None, "amp.nothing_to_remove", "--amp none: the script has no mixed "
                     "precision (no autocast, GradScaler or apex): nothing to remove",
                     severity="info")


def remove_scalers(ctx: Context, why: str) -> bool:
    """The GradScalers go: one assigned to a name and used only to scale, step and update
    is removed with its uses (scaler.scale(loss).backward() -> loss.backward(),
    scaler.step(opt) -> opt.step(), scaler.update() / scaler.unscale_(opt) removed); any
    other (its state saved, not assigned alone) is disabled (`enabled=False`: its calls
    pass through, its state stays). False when the script has none."""
    facts, plan = ctx.facts, ctx.plan
    names: set[str] = set()
    for call in scalers(facts):
        parent = facts.parent.get(call)
        held = {c for t in parent.targets if (c := dotted(t.target))} \
            if isinstance(parent, cst.Assign) else set()
        if isinstance(parent, cst.Assign) and held and not _used_otherwise(ctx, held):
            names |= held
            plan.remove(parent)
            plan.change(call, "amp.remove_scaler", f"GradScaler removed ({why})")
            continue
        at = _SCALER_ENABLED_AT.get(facts.call_name(call) or "", 4)
        plan.rewrite(call, partial(set_argument, name="enabled", code="False", position=at))
        plan.change(call, "amp.remove_scaler", f"GradScaler disabled with `enabled=False` "
                    f"({why}): its calls pass through" + (", its state is still saved"
                                                          if held else ""))
    for call in facts.calls:
        func = call.func
        if not isinstance(func, cst.Attribute):
            continue
        owner, attr = dotted(func.value), func.attr.value
        if owner in names and attr in ("update", "unscale_"):
            stmt = facts.statement(call)
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                plan.rewrite(stmt, constant(cst.RemoveFromParent()))
        elif owner in names and attr == "step" and call.args:
            plan.rewrite(call, constant(expression(f"{facts.code(call.args[0].value)}.step()")))
        elif owner in names and attr == "scale" and call.args:
            plan.rewrite(call, constant(call.args[0].value.deep_clone()))
    return bool(scalers(facts))


_PASSED_THROUGH = ("update", "unscale_", "step", "scale")


def _used_otherwise(ctx: Context, held: set[str]) -> bool:
    """Is a GradScaler held by these names used other than to scale, step, update and
    unscale (its state saved, loaded, passed on)?"""
    facts = ctx.facts
    for node in [*facts.names, *facts.attributes]:
        if dotted(node) not in held:
            continue
        parent = facts.parent.get(node)
        if isinstance(parent, cst.AssignTarget) or isinstance(parent, cst.Attribute) and \
                parent.value is node and parent.attr.value in _PASSED_THROUGH and \
                isinstance(call := facts.parent.get(parent), cst.Call) and call.func is parent:
            continue
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue  # `self.scaler`: the attribute's own name
        if isinstance(parent, cst.Attribute) and parent.value is node and dotted(parent) in held:
            continue  # `self` of `self.scaler`
        return True
    return False


# DeepSpeed: mixed precision is the config's (`--amp` sets it there); FSDP2 --amp bf16:
# its MixedPrecisionPolicy; accelerate --amp fp16|bf16: the Accelerator's mixed_precision.
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
