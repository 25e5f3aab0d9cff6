"""The model: wrap it in DistributedDataParallel, replace DataParallel, keep access working.

Finds the model as the object whose `.parameters()` an optimizer receives
(`optim.SGD(model.parameters(), ...)`, `self.model` in a class, a parameter of a
helper, whose caller's model is then wrapped instead), and inserts
`model = DDP(model, device_ids=[LOCAL_RANK] if torch.cuda.is_available() else None)`
before the optimizer is built, or after a later `model.to(...)` in the same block.

After the wrap, `model.anything_else` (custom methods and attributes, `state_dict`,
`load_state_dict`) becomes `model.module.anything_else`, also in the functions and
classes the model is passed to, so checkpoints keep their keys and `model.predict(x)`
keeps working. `nn.DataParallel(model)` is removed (DDP replaces it) and
`isinstance(m, nn.DataParallel)` checks test for DDP.

Won't: wrap a model that no optimizer trains (reported), or follow a model through
containers (lists, dicts) or more than three calls.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, block_body, dotted, positional
from distrun.convert.build import Rewrite, code_of, expression, statement
from distrun.convert.context import Context, LoaderToPrepare, Transform
from distrun.convert.edits import Plan
from distrun.convert.idioms import (
    DATA_PARALLEL,
    assigned_moved,
    assigns_inside,
    is_optimizer,
    moves,
    strip_moves,
)
from distrun.convert.wrapped import WrappedModel

# Attributes that DistributedDataParallel answers itself, exactly as the module would.
PASS_THROUGH = frozenset({
    "module", "parameters", "named_parameters", "buffers", "named_buffers", "children",
    "named_children", "modules", "named_modules", "train", "eval", "training", "zero_grad",
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "requires_grad_", "no_sync",
    "register_comm_hook", "apply", "forward", "join", "type",
})


def _model_of_optimizer(facts: Facts, call: cst.Call) -> str | None:
    for inner in facts.calls_in(call):
        func = inner.func
        if isinstance(func, cst.Attribute) and func.attr.value in (
            "parameters", "named_parameters"
        ):
            code = dotted(func.value)
            if code is not None:
                return code
    return None


def _anchor_statement(facts: Facts, call: cst.Call, code: str) -> cst.BaseStatement | None:
    """The statement before which the wrap goes: climb out of if/try/with blocks that
    only choose an optimizer, never out of a loop or function."""
    stmt = facts.statement(call)
    while stmt is not None:
        container = _conditional_container(facts, stmt)
        if container is None or assigns_inside(facts, container, code):
            return stmt
        stmt = container
    return None


def _conditional_container(facts: Facts, stmt: cst.CSTNode) -> cst.BaseStatement | None:
    for anc in facts.ancestors(stmt):
        if isinstance(anc, (cst.IndentedBlock, cst.Else, cst.ExceptHandler, cst.Finally)):
            continue
        if isinstance(anc, (cst.If, cst.Try, cst.With)):
            return anc
        return None
    return None


def plan_model(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    wrapped = ctx.models
    seen: set[tuple[int, str]] = set()
    for call in facts.calls:
        if not is_optimizer(facts, call):
            continue
        code = _model_of_optimizer(facts, call)
        if code is None:
            continue
        model = _wrap(ctx, call, code, seen, depth=0)
        if model is not None:
            wrapped.append(model)
    if not wrapped:
        plan.finding(
            None, "model", "no model found: no optimizer is built from `model.parameters()`",
            "wrap your model yourself: `model = DDP(model, device_ids=[LOCAL_RANK])` after "
            "moving it to its device",
        )
    _plan_data_parallel(ctx)
    for model in wrapped:
        _propagate(facts, model)
        _redirect(ctx, model)


TRANSFORM = Transform("model", plan_model)


def _wrap(
    ctx: Context, at: cst.Call, code: str, seen: set[tuple[int, str]], depth: int
) -> WrappedModel | None:
    facts, plan = ctx.facts, ctx.plan
    scope = facts.scope(at)
    key = (id(scope), code)
    if key in seen:
        return None
    seen.add(key)
    func = facts.function(at)
    if (
        func is not None
        and "." not in code
        and code in facts.params(func, False)
        and not assigns_inside(facts, func, code)
    ):
        # The optimizer is built in a helper that receives the model: wrap it in the caller.
        sites = facts.call_sites(func)
        if not sites or depth >= 3:
            plan.finding(at, "model", f"`{code}` is a parameter of `{func.name.value}()`; "
                         "could not find where the model is created",
                         f"wrap it where it is created: `{code} = DDP({code}, ...)`")
            return None
        result = None
        for site, is_method in sites:
            arg = facts.argument_for(site, func, is_method, code)
            arg_code = dotted(arg) if arg is not None else None
            if arg_code is not None:
                result = _wrap(ctx, site, arg_code, seen, depth + 1) or result
        return result
    anchor = _anchor_statement(facts, at, code)
    if anchor is None:
        return None
    if ctx.accelerate:
        return _prepare(ctx, at, anchor, code)
    return _insert_ddp(ctx, at, anchor, code)


def _insert_ddp(ctx: Context, at: cst.Call, anchor: cst.BaseStatement, code: str
                ) -> WrappedModel:
    """`code = DDP(code, ...)` before `anchor` (the optimizer's statement), or after a
    later move of the model in the same block."""
    facts, plan = ctx.facts, ctx.plan
    target: cst.CSTNode = anchor
    insert_after = False
    owner = facts.parent.get(anchor)
    siblings = list(owner.body) if isinstance(owner, (cst.IndentedBlock, cst.Module)) else []
    moved = False
    if anchor in siblings:
        index = siblings.index(anchor)
        moved = any(moves(facts, s, code) or assigned_moved(s, code)
                    for s in siblings[:index])
        for later in siblings[index + 1:]:
            if moves(facts, later, code):
                target, insert_after, moved = later, True, True
    ddp, rank, dev = ctx.names.ddp, ctx.names.local_rank, ctx.names.device
    # A model not visibly moved to its device first is moved in the wrap: DDP needs it there.
    inner = code if moved else f"{code}.to({dev})"
    wrap = statement(
        f"{code} = {ddp}({inner}, device_ids=[{rank}] if torch.cuda.is_available() else None)\n"
    )
    new = [wrap]
    if ctx.options.sync_bn:
        new.insert(0, statement(f"if torch.cuda.is_available():  # SyncBatchNorm runs on GPU only\n"
                                f"    {code} = torch.nn.SyncBatchNorm.convert_sync_batchnorm("
                                f"{code})\n"))
        plan.change(target, "sync-bn", f"BatchNorm layers of `{code}` -> SyncBatchNorm when "
                    "CUDA is available")
        plan.finding(target, "sync-bn", "SyncBatchNorm is used only with CUDA: on CPU each "
                     "rank keeps its own BatchNorm statistics", severity="info")
    if insert_after:
        plan.insert_after(target, new)
        from_line = facts.line(target) + 1
    else:
        plan.insert_before(target, new)
        from_line = facts.line(target)
    ctx.need("ddp")
    when = "after it is moved to its device" if insert_after else "before the optimizer is built"
    plan.change(target, "model", f"wrapped `{code}` in DistributedDataParallel ({when})")
    cls = facts.enclosing_class(at) if code.startswith("self.") else None
    return WrappedModel(code=code, scope=facts.scope(target), from_line=from_line, cls=cls)


def _prepare(ctx: Context, at: cst.Call, anchor: cst.BaseStatement, code: str
             ) -> WrappedModel:
    """accelerate: `model, optimizer = accelerator.prepare(model, optimizer)` after the
    statement that builds the optimizer (it wraps the model and moves it to its device)."""
    facts, plan, acc = ctx.facts, ctx.plan, ctx.names.accelerator
    small = anchor.body[0] if isinstance(anchor, cst.SimpleStatementLine) else None
    optimizer = None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        optimizer = dotted(small.targets[0].target)
    new = []
    if ctx.options.sync_bn:
        new.append(statement(f"if torch.cuda.is_available():  # SyncBatchNorm runs on GPU only\n"
                             f"    {code} = torch.nn.SyncBatchNorm.convert_sync_batchnorm("
                             f"{code})\n"))
        plan.change(anchor, "sync-bn", f"BatchNorm layers of `{code}` -> SyncBatchNorm when "
                    "CUDA is available")
    if optimizer:
        # Training loaders built before, in the same scope, go into the same prepare call:
        # preparing them where they are built would draw from the random generator before
        # the model's weights are initialised, unlike the original script.
        scope, line = facts.scope(anchor), facts.line(anchor)
        loaders: list[LoaderToPrepare] = [
            entry for entry in ctx.loaders_to_prepare
            if entry.name and facts.scope(entry.call) is scope and facts.line(entry.call) < line]
        for entry in loaders:
            ctx.loaders_to_prepare.remove(entry)
        names = [code, optimizer, *[entry.name for entry in loaders if entry.name]]
        joined = ", ".join(names)
        new.append(statement(f"{joined} = {acc}.prepare({joined})\n"))
        plan.change(anchor, "model", f"{', '.join(f'`{n}`' for n in names)} prepared by "
                    "accelerate (the model wrapped and placed on its device, loaders sharded)")
    else:
        new.append(statement(f"{code} = {acc}.prepare({code})\n"))
        plan.finding(anchor, "model", "the optimizer is not assigned to a name here: only the "
                     "model was prepared", f"pass the optimizer to `{acc}.prepare` too")
    plan.insert_after(anchor, new)
    cls = facts.enclosing_class(at) if code.startswith("self.") else None
    return WrappedModel(code=code, scope=facts.scope(anchor), from_line=facts.line(anchor) + 1,
                        cls=cls)


def _propagate(facts: Facts, model: WrappedModel) -> None:
    """Follow the wrapped model into the functions, methods and classes it is passed to."""
    work: list[tuple[cst.CSTNode, str, int]] = [(model.scope, model.code, model.from_line)]
    done: set[tuple[int, str]] = set()
    while work:
        scope, code, from_line = work.pop()
        if (id(scope), code) in done:
            continue
        done.add((id(scope), code))
        for call in facts.calls:
            if facts.scope(call) is not scope or facts.line(call) < from_line:
                continue
            found = facts.callee(call)
            if found is None:
                continue
            func, is_method = found
            param = facts.param_for(call, func, is_method, code)
            if param is not None:
                model.params.append((func, param))
                work.append((func, param, 0))
                cls = facts.enclosing_class(func)
                if cls is not None:
                    for attr in _self_attrs_assigned_from(facts, func, param):
                        model.class_attrs.append((cls, attr))


def _self_attrs_assigned_from(facts: Facts, func: cst.FunctionDef, param: str) -> list[str]:
    attrs = []
    for attr in facts.attributes:
        parent = facts.parent.get(attr)
        if not isinstance(parent, cst.AssignTarget) or not facts.inside(attr, func):
            continue
        assign = facts.parent.get(parent)
        if isinstance(assign, cst.Assign) and strip_moves(assign.value) == param:
            code = dotted(attr)
            if code and code.startswith("self."):
                attrs.append(code)
    return attrs


def _redirect(ctx: Context, model: WrappedModel) -> None:
    facts, plan = ctx.facts, ctx.plan
    for ref in model.references(facts):
        parent = facts.parent.get(ref)
        if not isinstance(parent, cst.Attribute) or parent.value is not ref:
            continue
        attr = parent.attr.value
        if attr in PASS_THROUGH:
            continue
        inner = ctx.unwrap(dotted(ref) or "model")
        plan.rewrite(parent, through_wrapper(ctx))
        plan.change(parent, "model", f"`{dotted(ref)}.{attr}` -> `{inner}.{attr}` "
                    "(reach the model inside the wrapper)")


def through_wrapper(ctx: Context) -> Rewrite:
    """`model.x` -> `model.module.x` (DDP) or `accelerator.unwrap_model(model).x`; a bare
    `model` -> the model inside the wrapper."""
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, cst.Attribute):
            return node.with_changes(value=expression(ctx.unwrap(code_of(node.value))))
        return expression(ctx.unwrap(code_of(node)))

    return rewrite


def _plan_data_parallel(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    wrapped_codes = {m.code for m in ctx.models}
    for call in facts.calls:
        if facts.call_name(call) not in DATA_PARALLEL:
            continue
        args = positional(call)
        inner = dotted(args[0].value) if args else None
        stmt = facts.statement(call)
        assign = facts.parent.get(call)
        if (
            isinstance(assign, cst.Assign)
            and assign.value is call
            and len(assign.targets) == 1
            and dotted(assign.targets[0].target) == inner
            and inner in wrapped_codes
            and stmt is not None
        ):
            _remove_statement(facts, plan, stmt, assign)
            plan.change(call, "model", f"removed `{facts.code(call.func)}({inner})`: "
                        "torch's DistributedDataParallel replaces it")
        elif args and inner in wrapped_codes or args and not ctx.models:
            plan.rewrite(call, lambda node: node.args[0].value.with_changes())  # type: ignore[attr-defined]
            plan.change(call, "model", "removed the `nn.DataParallel(...)` wrapper: "
                        "DistributedDataParallel replaces it")
        else:
            plan.rewrite(call, _to_ddp(ctx))
            plan.change(call, "model", "`nn.DataParallel(...)` -> `DDP(...)`")
    ddp = ctx.names.ddp
    for node in [*facts.names, *facts.attributes]:
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            continue
        if isinstance(parent, cst.Call) and parent.func is node:
            continue
        if facts.qualname(node) in DATA_PARALLEL:
            if isinstance(parent, (cst.ImportAlias,)) or any(
                isinstance(a, (cst.Import, cst.ImportFrom)) for a in facts.ancestors(node)
            ):
                continue
            ctx.need("ddp")
            plan.rewrite(node, lambda _n: cst.Name(ddp))
            plan.change(node, "model", f"`DataParallel` in a type check -> `{ddp}`")


def _to_ddp(ctx: Context) -> Rewrite:
    ddp, rank = ctx.names.ddp, ctx.names.local_rank
    ctx.need("ddp")

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        code = code_of(node.args[0].value)
        return expression(
            f"{ddp}({code}, device_ids=[{rank}] if torch.cuda.is_available() else None)"
        )

    return rewrite


def _remove_statement(facts: Facts, plan: Plan, stmt: cst.BaseStatement,
                      small: cst.BaseSmallStatement) -> None:
    """Remove the simple statement `small` (in `stmt`); an `if` left with nothing else in
    it goes too."""
    parent = facts.parent.get(stmt)
    owner = facts.parent.get(parent) if isinstance(parent, cst.IndentedBlock) else None
    if (
        isinstance(owner, cst.If)
        and owner.orelse is None
        and len(block_body(owner)) == 1
        and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
    ):
        plan.rewrite(owner, lambda _n: cst.RemoveFromParent())
    else:
        plan.remove(small)
