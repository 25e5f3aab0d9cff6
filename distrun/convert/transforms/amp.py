"""Mixed precision: deprecated forms modernised, NVIDIA apex amp migrated, `--amp` added.

Always:
  torch.cuda.amp.autocast(...)     ->  torch.autocast("cuda", ...)
  torch.cuda.amp.GradScaler(...)   ->  torch.amp.GradScaler("cuda", ...)
  apex amp (removed from apex in 2025) -> torch.autocast + torch.amp.GradScaler:
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
                                     ->  scaler = torch.amp.GradScaler("cuda", enabled=...)
    the forward pass and loss before the backward -> inside `with torch.autocast(...)`
    with amp.scale_loss(loss, optimizer) as scaled: scaled.backward()
                                     ->  scaler.scale(loss).backward()
    optimizer.step()                 ->  scaler.step(optimizer); scaler.update()
    amp.state_dict() / amp.load_state_dict(x) -> scaler.state_dict() / scaler.load_state_dict(x)
  opt levels: O0 fp32 (scaler disabled), O1/O2 fp16 autocast + scaler, O3 also a half
  model (reported). fp16 is enabled only with CUDA, so converted scripts run on CPU.
With `--amp fp16|bf16` on a script without mixed precision: the same autocast around
each training forward pass (bf16 also on CPU), and a GradScaler for fp16.

Won't: migrate apex inside a script that is already distributed (left as it is), or
find a forward pass that is not in the backward's own block (reported with the fix).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional, string_value
from distrun.convert.plan import (
    Plan,
    Rewrite,
    constant,
    expression,
    remove_small_statement,
    statement,
    statements,
)
from distrun.convert.transforms.model import WrappedModel, references

_DEPRECATED = {
    "torch.cuda.amp.autocast": 'torch.autocast("cuda"',
    "torch.cuda.amp.autocast_mode.autocast": 'torch.autocast("cuda"',
    "torch.cuda.amp.GradScaler": 'torch.amp.GradScaler("cuda"',
    "torch.cuda.amp.grad_scaler.GradScaler": 'torch.amp.GradScaler("cuda"',
}
_FP16_ON = "torch.cuda.is_available()"


@dataclass
class _Mixed:
    """How one training step gets mixed precision."""

    dtype: str  # "float16" | "bfloat16"
    device: str  # expression for the autocast device type
    enabled: str  # expression
    scaler: str | None  # name of the GradScaler, or None (bf16 needs none)


def plan_amp(facts: Facts, plan: Plan, amp: str, models: list[WrappedModel]) -> None:
    if amp == "none":
        remove_amp(facts, plan)
        return
    _modernise(facts, plan)
    migrated = _migrate_apex(facts, plan, models)
    if plan.accelerate:
        _accelerate_backward(facts, plan)
        return  # with accelerate, --amp is the Accelerator's mixed_precision
    if not migrated and amp in ("fp16", "bf16") and not _has_autocast(facts):
        _add_amp(facts, plan, amp, models)


def _accelerate_backward(facts: Facts, plan: Plan) -> None:
    """`loss.backward()` -> `accelerator.backward(loss)` (it scales the loss when needed)."""
    acc = plan.names.accelerator
    scaled = {dotted(item.asname.name) for c in facts.calls
              if facts.call_name(c) == "apex.amp.scale_loss"
              and isinstance(item := facts.parent.get(c), cst.WithItem) and item.asname}
    for call in facts.calls:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "backward"):
            continue
        if isinstance(func.value, cst.Call) or dotted(func.value) in {None, *scaled}:
            continue  # scaler.scale(loss).backward() and apex's scaled loss stay as they are

        def rewrite(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            loss = cst.Module([]).code_for_node(node.func.value)
            rest = "".join(", " + cst.Module([]).code_for_node(a).rstrip(", ")
                           for a in node.args)
            return expression(f"{acc}.backward({loss}{rest})")

        plan.rewrite(call, rewrite)
        plan.change(call, "backward", f"`{facts.code(func.value)}.backward()` -> "
                    f"`{acc}.backward({facts.code(func.value)})`")


def _modernise(facts: Facts, plan: Plan) -> None:
    for call in facts.calls:
        name = facts.call_name(call) or ""
        new = _DEPRECATED.get(name)
        if new is None:
            continue
        args = ", ".join(facts.code(a) for a in call.args)
        plan.rewrite(call, constant(expression(f"{new}{', ' + args if args else ''})")))
        plan.change(call, "amp", f"deprecated `{facts.code(call.func)}(...)` -> "
                    f"`{new.split('(')[0]}(\"cuda\", ...)`")
    _drop_cuda_amp_imports(facts, plan)


def _drop_cuda_amp_imports(facts: Facts, plan: Plan) -> None:
    for stmt in dict.fromkeys(facts.import_statements):  # a line with 2 imports is there twice
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and dotted(small.module or cst.Name("x")) in (
                    "torch.cuda.amp",):
                remove_small_statement(plan, small)
                plan.change(stmt, "amp", "import from the deprecated torch.cuda.amp removed")


def _has_autocast(facts: Facts) -> bool:
    return any((facts.call_name(c) or "").endswith("autocast") for c in facts.calls)


def _scaler_name(facts: Facts) -> str:
    name = "scaler"
    while name in facts.bound_names:
        name = f"{name}_"
    facts.bound_names.add(name)
    return name


def _migrate_apex(facts: Facts, plan: Plan, models: list[WrappedModel]) -> bool:
    inits = [c for c in facts.calls if facts.call_name(c) == "apex.amp.initialize"]
    scale_withs = [c for c in facts.calls if facts.call_name(c) == "apex.amp.scale_loss"]
    if not inits and not scale_withs:
        _migrate_syncbn(facts, plan)
        _drop_apex_imports(facts, plan)
        return False
    scaler = _scaler_name(facts)
    if inits and facts.enclosing_class(inits[0]) is not None:
        scaler = "self.scaler"  # the methods that scale the loss find it on the object
    elif inits:
        home = facts.function(inits[0])
        elsewhere = [c for c in scale_withs if facts.function(c) is not home]
        if elsewhere:
            plan.finding(elsewhere[0], "amp", f"the loss is scaled outside the function that "
                         f"creates `{scaler}`", f"pass `{scaler}` to this function, or make it "
                         "a global")
    for call in inits:
        opt = keyword(call, "opt_level")
        level = (string_value(opt.value) if opt else None) or "O1"
        enabled = "False" if level == "O0" else _FP16_ON
        stmt = facts.statement(call)
        new = [f'{scaler} = torch.amp.GradScaler("cuda", enabled={enabled})\n']
        assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
        if isinstance(assign, cst.Assign):
            targets = facts.code(assign.targets[0].target)
            sources = ", ".join(facts.code(a.value) for a in positional(call))
            if targets.replace(" ", "").strip("()") != sources.replace(" ", ""):
                new.insert(0, f"{targets} = {sources}\n")
        if level == "O3":
            plan.finding(call, "amp", "opt_level O3 (a pure fp16 model) became fp16 autocast "
                         "with fp32 weights, like O1/O2: halving a model after its DDP wrap "
                         "breaks DDP", "if you need pure fp16, call `model.half()` before the "
                         "DDP wrap")
        if stmt is not None:
            replacement = statements("".join(new))
            plan.rewrite(stmt, _keep_comments(replacement))
        what = "disabled: O0 is fp32" if level == "O0" else "fp16 on GPU"
        plan.change(call, "amp", f"apex `amp.initialize(opt_level=\"{level}\")` -> "
                    f"`torch.amp.GradScaler` ({what})")
    mixed = _Mixed("float16", '"cuda"', "False" if level == "O0" else _FP16_ON, scaler)
    for call in scale_withs:
        _migrate_scale_loss(facts, plan, call, mixed, models)
    _migrate_syncbn(facts, plan)
    for call in facts.calls:
        name = facts.call_name(call)
        if name in ("apex.amp.state_dict", "apex.amp.load_state_dict"):
            method = name.rsplit(".", 1)[1]
            plan.rewrite(call.func, constant(expression(f"{scaler}.{method}")))
            plan.change(call, "amp", f"`amp.{method}` -> `{scaler}.{method}` (the GradScaler's "
                        "state)")
    _drop_apex_imports(facts, plan)
    plan.needed_imports.add("torch")
    return True


def _drop_apex_imports(facts: Facts, plan: Plan) -> None:
    for stmt in dict.fromkeys(facts.import_statements):  # a line with 2 imports is there twice
        for small in stmt.body:
            module = dotted(small.module) if isinstance(small, cst.ImportFrom) and small.module \
                else None
            names = [dotted(a.name) for a in small.names] if isinstance(small, cst.Import) \
                else []
            if (module or "").split(".")[0] == "apex" or any((n or "").split(".")[0] == "apex"
                                                             for n in names):
                remove_small_statement(plan, small)
                plan.change(stmt, "amp", "apex import removed: torch replaces it")


def _migrate_syncbn(facts: Facts, plan: Plan) -> None:
    """apex.parallel.convert_syncbn_model(m) -> torch's SyncBatchNorm, on GPU only."""
    for call in facts.calls:
        if facts.call_name(call) != "apex.parallel.convert_syncbn_model" or not call.args:
            continue
        model = facts.code(call.args[0].value)
        plan.rewrite(call, constant(expression(
            f"(torch.nn.SyncBatchNorm.convert_sync_batchnorm({model}) "
            f"if torch.cuda.is_available() else {model})")))
        plan.change(call, "amp", "apex `convert_syncbn_model` -> "
                    "`torch.nn.SyncBatchNorm.convert_sync_batchnorm` (GPU only: SyncBatchNorm "
                    "does not run on CPU)")


def _keep_comments(new: list[cst.BaseStatement]) -> Rewrite:
    """Several statements in place of one, the comments above the old one kept."""
    def rewrite(old: cst.CSTNode) -> cst.FlattenSentinel[cst.BaseStatement]:
        leading = getattr(old, "leading_lines", ())
        return cst.FlattenSentinel([new[0].with_changes(leading_lines=leading), *new[1:]])

    return rewrite


def _migrate_scale_loss(facts: Facts, plan: Plan, call: cst.Call, mixed: _Mixed,
                        models: list[WrappedModel]) -> None:
    scaler = mixed.scaler
    args = positional(call)
    with_stmt = facts.statement(call)
    if not isinstance(with_stmt, cst.With) or len(args) < 2:
        plan.finding(call, "amp", "amp.scale_loss outside a `with` statement: not migrated",
                     f"use `{scaler}.scale(loss).backward()`")
        return
    loss, optimizer = facts.code(args[0].value), facts.code(args[1].value)
    item = with_stmt.items[0]
    alias = dotted(item.asname.name) if item.asname else None

    def rewrite(node: cst.CSTNode) -> cst.FlattenSentinel[cst.BaseStatement]:
        assert isinstance(node, cst.With)
        body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
        code = "".join(cst.Module([]).code_for_node(s) for s in body)
        if alias:
            code = code.replace(f"{alias}.", f"{scaler}.scale({loss}).")
        new = statements(code or f"{scaler}.scale({loss}).backward()\n")
        return cst.FlattenSentinel([new[0].with_changes(leading_lines=node.leading_lines),
                                    *new[1:]])

    plan.rewrite(with_stmt, rewrite)
    plan.change(with_stmt, "amp", f"`with amp.scale_loss(...)` -> `{scaler}.scale({loss})`")
    _autocast_forward(facts, plan, with_stmt, loss, mixed, models)
    _scaled_steps(facts, plan, with_stmt, optimizer, scaler)


def _scaled_steps(facts: Facts, plan: Plan, near: cst.CSTNode, optimizer: str,
                  scaler: str | None) -> None:
    if scaler is None:
        return
    scope = facts.scope(near)
    for call in facts.calls:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "step"
                and dotted(func.value) == optimizer and facts.scope(call) is scope):
            continue
        stmt = facts.statement(call)
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            plan.rewrite(call, lambda _n: expression(f"{scaler}.step({optimizer})"))
            plan.insert_after(stmt, [statement(f"{scaler}.update()\n")])
            plan.change(call, "amp", f"`{optimizer}.step()` -> `{scaler}.step({optimizer})` "
                        f"and `{scaler}.update()`")


def _autocast_forward(facts: Facts, plan: Plan, backward_stmt: cst.CSTNode, loss: str,
                      mixed: _Mixed, models: list[WrappedModel]) -> None:
    """Put the statements from the model's forward call to the loss inside autocast."""
    block = facts.parent.get(backward_stmt)
    siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    if backward_stmt not in siblings:
        return
    index = siblings.index(backward_stmt)  # type: ignore[arg-type]
    loss_at = next((i for i in range(index - 1, -1, -1) if _assigns(siblings[i], loss)), None)
    if loss_at is None:
        plan.finding(backward_stmt, "amp", f"no `{loss} = ...` before the backward in its block: "
                     "the forward pass was not put under autocast",
                     f"wrap the forward pass and loss in `with torch.autocast(\"cuda\", "
                     f"dtype=torch.{mixed.dtype}):`")
        return
    model_refs = {id(r) for m in models for r in references(facts, m)}
    aliases = _initialized_models(facts)
    first = loss_at
    for i in range(loss_at, -1, -1):
        if _calls_model(facts, siblings[i], model_refs, aliases):
            first = i
    head = f"torch.autocast({mixed.device}, dtype=torch.{mixed.dtype}, enabled={mixed.enabled})"

    def make(body: list[cst.BaseStatement]) -> cst.BaseStatement:
        leading = body[0].leading_lines  # type: ignore[attr-defined]
        inner = [body[0].with_changes(leading_lines=()), *body[1:]]
        with_node = cst.ensure_type(statement(f"with {head}:\n    pass\n"), cst.With)
        return with_node.with_changes(body=cst.IndentedBlock(body=inner), leading_lines=leading)

    plan.wrap(siblings[first], siblings[loss_at], make)
    plan.change(siblings[first], "amp", f"forward pass and loss under `torch.autocast` "
                f"({mixed.dtype})")


def _assigns(stmt: cst.CSTNode, name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) \
                else [small.target]
            if any(dotted(t) == name for t in targets):
                return True
    return False


def _calls_model(facts: Facts, stmt: cst.CSTNode, refs: set[int], aliases: set[str]) -> bool:
    return any(id(c.func) in refs or dotted(c.func) in aliases for c in facts.calls_in(stmt))


def _initialized_models(facts: Facts) -> set[str]:
    """Names given to the model by `model_amp, opt = amp.initialize(model, opt, ...)`."""
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


def _add_amp(facts: Facts, plan: Plan, amp: str, models: list[WrappedModel]) -> None:
    dtype = "float16" if amp == "fp16" else "bfloat16"
    scaler = _scaler_name(facts) if amp == "fp16" else None
    device = f"{plan.names.device}.type"
    enabled = _FP16_ON if amp == "fp16" else "True"
    mixed = _Mixed(dtype, device, enabled, scaler)
    done = False
    backward_scopes = set()
    for call in facts.calls:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "backward"):
            continue
        stmt = facts.statement(call)
        loss = dotted(func.value)
        if loss is None or not isinstance(stmt, cst.SimpleStatementLine):
            continue
        _autocast_forward(facts, plan, stmt, loss, mixed, models)
        backward_scopes.add(id(facts.scope(stmt)))
        if scaler is not None:
            plan.rewrite(func.value, lambda n: expression(
                f"{scaler}.scale({cst.Module([]).code_for_node(n)})"))
            optimizer = _optimizer_near(facts, stmt)
            if optimizer:
                _scaled_steps(facts, plan, stmt, optimizer, scaler)
        done = True
    if scaler is not None and done:
        create = f'{scaler} = torch.amp.GradScaler("cuda", enabled={_FP16_ON})\n'
        anchor = next((facts.statement(c) for c in facts.calls
                       if _is_optimizer_call(facts, c)), None)
        if anchor is not None and backward_scopes == {id(facts.scope(anchor))}:
            plan.insert_after(anchor, [statement(create)])
        else:  # the steps run in other functions: one scaler for the whole script
            plan.setup_extra.append(create)
        plan.change(anchor or facts.module, "amp", f"`{scaler} = torch.amp.GradScaler(\"cuda\")` "
                    "for fp16 (enabled with CUDA only)")
    if not done:
        plan.finding(None, "amp", f"--amp {amp}: no `loss.backward()` found to put under autocast",
                     "wrap the forward pass in `torch.autocast` yourself")


def _is_optimizer_call(facts: Facts, call: cst.Call) -> bool:
    from distrun.convert.transforms.model import is_optimizer

    return is_optimizer(facts, call)


def _optimizer_near(facts: Facts, stmt: cst.CSTNode) -> str | None:
    scope = facts.scope(stmt)
    for call in facts.calls:
        func = call.func
        if (isinstance(func, cst.Attribute) and func.attr.value == "step"
                and facts.scope(call) is scope and dotted(func.value)
                and "sched" not in (dotted(func.value) or "")):
            return dotted(func.value)
    return None


_AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
             "torch.cpu.amp.autocast", "torch.amp.autocast_mode.autocast")
_SCALERS = ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler")


def remove_amp(facts: Facts, plan: Plan) -> None:
    """`--amp none`: autocast blocks become their bodies; the GradScaler goes:
    scaler.scale(loss).backward() -> loss.backward(), scaler.step(opt) -> opt.step(),
    scaler.update() / scaler.unscale_(opt) removed."""
    scalers: set[str] = set()
    _drop_cuda_amp_imports(facts, plan)
    for call in facts.calls:
        name = facts.call_name(call) or ""
        parent = facts.parent.get(call)
        if name in _AUTOCAST and isinstance(parent, cst.WithItem):
            with_stmt = facts.parent.get(parent)
            if isinstance(with_stmt, cst.With) and len(with_stmt.items) == 1:
                plan.rewrite(with_stmt, _unwrap_with)
                plan.change(with_stmt, "amp", "autocast removed (--amp none): full precision")
        elif name in _SCALERS and isinstance(parent, cst.Assign):
            scalers |= {c for t in parent.targets if (c := dotted(t.target))}
            remove_small_statement(plan, parent)
            plan.change(call, "amp", "GradScaler removed (--amp none)")
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
            plan.finding(call, "amp", f"`{owner}.{attr}` kept, but the GradScaler is gone",
                         "remove the GradScaler's state from checkpoints")


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
