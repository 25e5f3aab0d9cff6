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

from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.analysis import Facts, block_body, dotted, positional
from distrun.convert.plan import Plan, Rewrite, expression, remove_small_statement, statement

# Attributes that DistributedDataParallel answers itself, exactly as the module would.
PASS_THROUGH = frozenset({
    "module", "parameters", "named_parameters", "buffers", "named_buffers", "children",
    "named_children", "modules", "named_modules", "train", "eval", "training", "zero_grad",
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "requires_grad_", "no_sync",
    "register_comm_hook", "apply", "forward", "join", "type",
})
DATA_PARALLEL = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel",
    "apex.parallel.DistributedDataParallel",  # apex's DDP: replaced like DataParallel
})
_OPTIMIZER_NAMES = frozenset({
    "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "NAdam",
    "RAdam", "SparseAdam", "LBFGS", "Lion", "Adafactor", "LAMB", "Lamb",
})


@dataclass
class WrappedModel:
    """Where a model is wrapped, and every place that sees the wrapped object."""

    code: str  # "model" or "self.model"
    scope: cst.CSTNode  # the function (or module) where the wrap is inserted
    from_line: int  # references in `scope` at or after this line see the wrapper
    cls: cst.ClassDef | None = None
    params: list[tuple[cst.FunctionDef, str]] = field(default_factory=list)
    class_attrs: list[tuple[cst.ClassDef, str]] = field(default_factory=list)


def is_optimizer(facts: Facts, call: cst.Call) -> bool:
    name = facts.call_name(call) or ""
    if name.startswith("torch.optim.lr_scheduler") or name.startswith("torch.optim.swa_utils"):
        return False
    last = name.rsplit(".", 1)[-1]
    return name.startswith("torch.optim.") and last[:1].isupper() or last in _OPTIMIZER_NAMES


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


def _assigns(facts: Facts, container: cst.CSTNode, code: str) -> bool:
    for node in [*facts.names, *facts.attributes]:
        parent = facts.parent.get(node)
        if (
            isinstance(parent, cst.AssignTarget)
            and dotted(node) == code
            and facts.inside(node, container)
        ):
            return True
    return False


def _anchor_statement(facts: Facts, call: cst.Call, code: str) -> cst.BaseStatement | None:
    """The statement before which the wrap goes: climb out of if/try/with blocks that
    only choose an optimizer, never out of a loop or function."""
    stmt = facts.statement(call)
    while stmt is not None:
        container = _conditional_container(facts, stmt)
        if container is None or _assigns(facts, container, code):
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


def _moves_model(facts: Facts, stmt: cst.CSTNode, code: str) -> bool:
    for call in facts.calls_in(stmt):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda"):
            if dotted(func.value) == code:
                return True
    return False


def _assigned_moved(stmt: cst.CSTNode, code: str) -> bool:
    """`model = Net().to(device)` (or `.cuda()`)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if (
            isinstance(small, cst.Assign)
            and any(dotted(t.target) == code for t in small.targets)
            and isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Attribute)
            and small.value.func.attr.value in ("to", "cuda")
        ):
            return True
    return False


def plan_model(facts: Facts, plan: Plan) -> list[WrappedModel]:
    wrapped: list[WrappedModel] = []
    seen: set[tuple[int, str]] = set()
    for call in facts.calls:
        if not is_optimizer(facts, call):
            continue
        code = _model_of_optimizer(facts, call)
        if code is None:
            continue
        model = _wrap(facts, plan, call, code, seen, depth=0)
        if model is not None:
            wrapped.append(model)
    if not wrapped:
        plan.finding(
            None, "model", "no model found: no optimizer is built from `model.parameters()`",
            "wrap your model yourself: `model = DDP(model, device_ids=[LOCAL_RANK])` after "
            "moving it to its device",
        )
    _plan_data_parallel(facts, plan, wrapped)
    for model in wrapped:
        _propagate(facts, model)
        _redirect(facts, plan, model)
    return wrapped


def _wrap(
    facts: Facts, plan: Plan, at: cst.Call, code: str, seen: set[tuple[int, str]], depth: int
) -> WrappedModel | None:
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
        and not _assigns(facts, func, code)
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
                result = _wrap(facts, plan, site, arg_code, seen, depth + 1) or result
        return result
    anchor = _anchor_statement(facts, at, code)
    if anchor is None:
        return None
    target: cst.CSTNode = anchor
    insert_after = False
    owner = facts.parent.get(anchor)
    siblings = list(owner.body) if isinstance(owner, (cst.IndentedBlock, cst.Module)) else []
    moved = False
    if anchor in siblings:
        index = siblings.index(anchor)
        moved = any(_moves_model(facts, s, code) or _assigned_moved(s, code)
                    for s in siblings[:index])
        for later in siblings[index + 1:]:
            if _moves_model(facts, later, code):
                target, insert_after, moved = later, True, True
    if plan.accelerate:
        return _prepare(facts, plan, at, anchor, code)
    ddp, rank, dev = plan.names.ddp, plan.names.local_rank, plan.names.device
    # A model not visibly moved to its device first is moved in the wrap: DDP needs it there.
    inner = code if moved else f"{code}.to({dev})"
    wrap = statement(
        f"{code} = {ddp}({inner}, device_ids=[{rank}] if torch.cuda.is_available() else None)\n"
    )
    new = [wrap]
    if plan.options.sync_bn:
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
    plan.needed_imports.add("ddp")
    when = "after it is moved to its device" if insert_after else "before the optimizer is built"
    plan.change(target, "model", f"wrapped `{code}` in DistributedDataParallel ({when})")
    cls = facts.enclosing_class(at) if code.startswith("self.") else None
    return WrappedModel(code=code, scope=facts.scope(target), from_line=from_line, cls=cls)


def _prepare(facts: Facts, plan: Plan, at: cst.Call, anchor: cst.BaseStatement, code: str
             ) -> WrappedModel:
    """accelerate: `model, optimizer = accelerator.prepare(model, optimizer)` after the
    statement that builds the optimizer (it wraps the model and moves it to its device)."""
    acc = plan.names.accelerator
    small = anchor.body[0] if isinstance(anchor, cst.SimpleStatementLine) else None
    optimizer = None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        optimizer = dotted(small.targets[0].target)
    new = []
    if plan.options.sync_bn:
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
        loaders = [(c, n, w) for c, n, w in plan.loaders_to_prepare
                   if n and facts.scope(c) is scope and facts.line(c) < line]
        for entry in loaders:
            plan.loaders_to_prepare.remove(entry)
        names = [code, optimizer, *[n for _, n, _ in loaders if n]]
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
        if isinstance(assign, cst.Assign) and _strip_moves(assign.value) == param:
            code = dotted(attr)
            if code and code.startswith("self."):
                attrs.append(code)
    return attrs


def _strip_moves(expr: cst.BaseExpression) -> str | None:
    """`model`, `model.to(device)`, `model.cuda()` -> "model"."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("to", "cuda")
    ):
        expr = expr.func.value
    return dotted(expr)


def references(facts: Facts, model: WrappedModel) -> list[cst.CSTNode]:
    """Every expression that denotes the wrapped model."""
    found: list[cst.CSTNode] = []
    candidates: list[cst.CSTNode] = [*facts.names, *facts.attributes]
    for node in candidates:
        code = dotted(node)  # type: ignore[arg-type]
        if code is None:
            continue
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is not node:
            continue  # `x.model`: the attribute name, not a reference
        if isinstance(parent, (cst.AssignTarget, cst.Param)):
            continue
        if _denotes(facts, model, node, code):
            found.append(node)
    return found


def _denotes(facts: Facts, model: WrappedModel, node: cst.CSTNode, code: str) -> bool:
    scope = facts.scope(node)
    if code == model.code:
        if model.cls is not None and code.startswith("self."):
            if facts.enclosing_class(node) is not model.cls:
                return False
            return scope is not model.scope or facts.line(node) >= model.from_line
        if scope is model.scope and facts.line(node) >= model.from_line:
            return True
    for func, param in model.params:
        if scope is func and code == param:
            return True
    for cls, attr in model.class_attrs:
        if code == attr and facts.enclosing_class(node) is cls:
            return True
    return code in _instance_codes(facts, model, scope)


def _instance_codes(facts: Facts, model: WrappedModel, scope: cst.CSTNode) -> set[str]:
    """`trainer.model` where `trainer = Trainer(...)` and the class wraps `self.model`."""
    attrs = [model.code] if model.cls is not None and model.code.startswith("self.") else []
    attrs += [a for _, a in model.class_attrs if a.startswith("self.")]
    classes = {c.name.value for c in [model.cls, *(c for c, _ in model.class_attrs)] if c}
    if not attrs or not classes:
        return set()
    codes = set()
    for call in facts.calls:
        parent = facts.parent.get(call)
        if (isinstance(call.func, cst.Name) and call.func.value in classes
                and isinstance(parent, cst.Assign) and facts.scope(call) is scope):
            for target in parent.targets:
                if (instance := dotted(target.target)) is not None:
                    codes |= {f"{instance}.{a.removeprefix('self.')}" for a in attrs}
    return codes


def _redirect(facts: Facts, plan: Plan, model: WrappedModel) -> None:
    for ref in references(facts, model):
        parent = facts.parent.get(ref)
        if not isinstance(parent, cst.Attribute) or parent.value is not ref:
            continue
        attr = parent.attr.value
        if attr in PASS_THROUGH:
            continue
        inner = plan.unwrap(dotted(ref) or "model")
        plan.rewrite(parent, through_wrapper(plan))
        plan.change(parent, "model", f"`{dotted(ref)}.{attr}` -> `{inner}.{attr}` "
                    "(reach the model inside the wrapper)")


def through_wrapper(plan: Plan) -> Rewrite:
    """`model.x` -> `model.module.x` (DDP) or `accelerator.unwrap_model(model).x`; a bare
    `model` -> the model inside the wrapper."""
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, cst.Attribute):
            inner = cst.Module([]).code_for_node(node.value)
            return node.with_changes(value=expression(plan.unwrap(inner)))
        return expression(plan.unwrap(cst.Module([]).code_for_node(node)))

    return rewrite


def _plan_data_parallel(facts: Facts, plan: Plan, wrapped: list[WrappedModel]) -> None:
    wrapped_codes = {m.code for m in wrapped}
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
        elif args and inner in wrapped_codes or args and not wrapped:
            plan.rewrite(call, lambda node: node.args[0].value.with_changes())  # type: ignore[attr-defined]
            plan.change(call, "model", "removed the `nn.DataParallel(...)` wrapper: "
                        "DistributedDataParallel replaces it")
        else:
            plan.rewrite(call, _to_ddp(plan))
            plan.change(call, "model", "`nn.DataParallel(...)` -> `DDP(...)`")
    ddp = plan.names.ddp
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
            plan.needed_imports.add("ddp")
            plan.rewrite(node, lambda _n: cst.Name(ddp))
            plan.change(node, "model", f"`DataParallel` in a type check -> `{ddp}`")


def _to_ddp(plan: Plan) -> Rewrite:
    ddp, rank = plan.names.ddp, plan.names.local_rank
    plan.needed_imports.add("ddp")

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        inner = node.args[0].value
        code = cst.Module([]).code_for_node(inner)
        return cst.parse_expression(
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
        remove_small_statement(plan, small)
