"""The model: its training forward passes go through DistributedDataParallel; every
other use keeps the model itself.

    model = Net().to(device)                  model = Net().to(device)
    optimizer = SGD(model.parameters())  ->   optimizer = SGD(model.parameters())
    for x, y in loader:                       ddp_model = DDP(model, device_ids=...)
        loss = crit(model(x), y)              for x, y in loader:
        ...                                       loss = crit(ddp_model(x), y)

The DDP object gets a name of its own (`ddp_model`, `self.ddp_model`), created after
the model is built, moved and loaded, before the first statement that trains it, and
used only by the training forward passes (see `convert.models`). Everything else reads
the model itself, right by construction: `model.state_dict()` (no `module.` prefix),
`torch.save(model)`, `model.n_classes`, `model.predict(x)`, `writer.add_graph(model)`,
`evaluate(model)` in another module, a model rebound by `torch.load` for testing.
A function that trains a model it receives (`def train(model, ...)`) is given the DDP
object by its callers; inside it, other uses reach the model with `.module`.

`nn.DataParallel(model)` is removed (DDP replaces it) and `model.module` then reads
`model`; `isinstance(m, nn.DataParallel)` tests for DDP.

Won't: wrap a model no optimizer trains, or one whose training forward goes through
an expression that cannot hold a name (`models[i](x)`): reported with the fix. A model
with no training forward found at all has its gradients averaged by hand before each
step of its optimizer instead (transforms/hand_average.py; the DDP target).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, block_body, dotted, positional
from distrun.convert.build import Rewrite, code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.edits import Plan
from distrun.convert.idioms import DATA_PARALLEL
from distrun.convert.layers import plan_sync_bn
from distrun.convert.models import find_models
from distrun.convert.object_flow import Place
from distrun.convert.transforms import wrap
from distrun.convert.transforms.hand_average import average_by_hand, side_forwards


def plan_model(ctx: Context) -> None:
    facts = ctx.facts
    ctx.models = find_models(facts, ctx.flow)
    removed = _plan_data_parallel(ctx)
    if ctx.options.sync_bn and ctx.models:
        plan_sync_bn(ctx)
    if not ctx.models:
        ctx.plan.finding(
            None, "model.not_found",
            "no model found: no optimizer is built from `model.parameters()`",
            "wrap your model yourself: `ddp_model = DDP(model, device_ids=[LOCAL_RANK])` "
            "after moving it to its device, and call `ddp_model(x)` in the training loop")
        return
    for model in ctx.models:
        if not model.forwards and average_by_hand(ctx, model):
            continue
        if not model.forwards:
            ctx.plan.finding(model.optimizer, "model.no_forward", f"no training forward pass of "
                             f"`{model.place.code}` found: it was not wrapped, and its "
                             "gradients would not be averaged across ranks",
                             "wrap it: `ddp_model = DDP(model, device_ids=[LOCAL_RANK])` and "
                             "call `ddp_model(x)` where the training loop calls the model")
            continue
        if not ctx.target.wraps_model:
            continue  # FSDP2 shards the model in place: see targets/fsdp.py
        for call in model.unhomed:
            ctx.plan.finding(call, "model.unnamed_forward", f"this training forward pass calls "
                             f"`{facts.code(call.func)}`, which cannot be given a "
                             "DistributedDataParallel object: not synchronised",
                             "bind the model to a name first, wrap it with DDP and call that")
        wrap.plan_wraps(ctx, model)
        side = side_forwards(ctx, model)
        if side and not average_by_hand(ctx, model, side):
            ctx.plan.finding(side[0], "model.side_forward", f"`{facts.code(side[0].func)}` "
                             f"trains `{model.place.code}` through a method of its own, "
                             "around the forward the wrapper synchronises: its gradients "
                             "would not be averaged across ranks",
                             "call the model itself (its forward) in the training step, or "
                             "average the gradients by hand before each optimizer step")
    if removed:
        _drop_module_attribute(ctx)


TRANSFORM = Transform("model", plan_model)


def _plan_data_parallel(ctx: Context) -> bool:
    """DataParallel removed or replaced; True if a model's DataParallel wrap was removed."""
    facts, plan, flow = ctx.facts, ctx.plan, ctx.flow
    removed = False
    wrapped_at: list[tuple[cst.CSTNode, Place]] = []  # where a model's DataParallel was
    for call in facts.calls:
        if facts.call_name(call) not in DATA_PARALLEL:
            continue
        args = positional(call)
        inner = args[0].value if args else None
        inner_place = flow.place_of(flow.strip(inner)) if inner is not None else None
        is_model = any(inner_place is not None and flow.same(inner_place, m.place)
                       for m in ctx.models) or _returned_into_model(ctx, call, inner)
        assign = facts.parent.get(call)
        into_model = isinstance(assign, cst.Assign) and len(assign.targets) == 1 and any(
            flow.same(flow.place_of(assign.targets[0].target), m.place) for m in ctx.models)
        stmt = facts.statement(call)
        if (isinstance(assign, cst.Assign) and assign.value is call and is_model
                and len(assign.targets) == 1 and stmt is not None
                and flow.same(flow.place_of(assign.targets[0].target), inner_place)):
            if inner_place is not None and _under_condition(facts, stmt) \
                    and _state_reads(ctx, [(stmt, inner_place)]):
                target = facts.code(assign.targets[0].target)  # the keys follow the wrap
                plan.rewrite(assign, _flag_assignment(target))
                plan.change(call, "model.dataparallel", f"`{facts.code(call)}` made under a "
                            f"condition: DistributedDataParallel replaces it; `{target}."
                            f"{_FLAG} = True` marks where it happened")
            else:
                _remove_statement(facts, plan, stmt, assign)
                plan.change(call, "model.dataparallel", f"removed `{facts.code(call)}`: "
                            "torch's DistributedDataParallel replaces it")
            removed = True
            if inner_place is not None:
                wrapped_at.append((stmt, inner_place))
        elif args and (is_model or into_model or not ctx.models):  # `m = DataParallel(Net())`
            plan.rewrite(call, lambda node: node.args[0].value.with_changes())  # type: ignore[attr-defined]
            plan.change(call, "model.dataparallel", "removed the `nn.DataParallel(...)` wrapper: "
                        "DistributedDataParallel replaces it")
            removed = True
            bound = _bound_by(facts, call)  # `m = DataParallel(m).to(device)` too
            holder = bound.targets[0].target if bound is not None and len(
                bound.targets) == 1 else None
            place = flow.place_of(holder) if holder is not None else None
            if stmt is not None and place is not None:
                wrapped_at.append((stmt, place))
        else:
            plan.rewrite(call, _to_ddp(ctx, call))
            plan.change(call, "model.dataparallel", "`nn.DataParallel(...)` -> `DDP(...)`")
    _type_checks(ctx)
    _keep_dataparallel_keys(ctx, wrapped_at)
    return removed


def _returned_into_model(ctx: Context, call: cst.Call, inner: cst.BaseExpression | None
                         ) -> bool:
    """`model = nn.DataParallel(model)` in a builder that returns `model`, its result made
    a model where it is called (`self.model = self._build_model().to(self.device)`)."""
    facts, flow = ctx.facts, ctx.flow
    func = facts.function(call)
    if func is None or not isinstance(inner, cst.Name) or not any(
            facts.function(r) is func and isinstance(r.value, cst.Name)
            and r.value.value == inner.value for r in facts.returns):
        return False
    sites = [site for site, _ in facts.call_sites(func)] + [  # a base class's call
        c for c in facts.calls if isinstance(c.func, cst.Attribute) and dotted(
            c.func.value) == "self" and c.func.attr.value == func.name.value]
    for site in sites:
        assign = _bound_by(facts, site)
        if assign is not None and len(assign.targets) == 1 and any(
                flow.same(flow.place_of(assign.targets[0].target), m.place)
                for m in ctx.models):
            return True
    return False


def _bound_by(facts: Facts, call: cst.Call) -> cst.Assign | None:
    """The assignment whose value is `call`, or `call` followed by method calls on its
    result (`DataParallel(model).to(device)`, `.cuda()`)."""
    node: cst.CSTNode = call
    for _ in range(8):
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Assign) and parent.value is node:
            return parent
        outer = facts.parent.get(parent) if parent is not None else None
        if not (isinstance(parent, cst.Attribute) and parent.value is node
                and isinstance(outer, cst.Call) and outer.func is parent):
            return None
        node = outer
    return None


def _keep_dataparallel_keys(ctx: Context, wrapped_at: list[tuple[cst.CSTNode, Place]]) -> None:
    """The state of a model read through its DataParallel wrapper (the very name the
    wrapper was bound to, after that; not `model.module` or an unwrapped alias) had
    `module.` keys: the converted run saves the same keys (the project's own tools load
    them), and loads such a state into the model itself."""
    facts, flow, plan = ctx.facts, ctx.flow, ctx.plan
    for call, method in _state_reads(ctx, wrapped_at):
        assert isinstance(call.func, cst.Attribute)
        place = flow.place_of(call.func.value)
        flagged = [stmt for stmt, wrapped in wrapped_at
                   if place == wrapped and _under_condition(facts, stmt)]
        if method == "state_dict" and flagged:
            plan.rewrite(call, _prefix_if_flagged(code_of(call.func.value)))
            plan.change(call, "model.dataparallel_keys", f"`{facts.code(call)}` read the "
                        "DataParallel wrapper's state where the wrap was made (line "
                        f"{facts.line(flagged[0])}, under a condition): keys `module.*` "
                        "there, plain elsewhere, as the original's")
        elif method == "state_dict":
            plan.rewrite(call, lambda node: expression(
                f'{{"module." + key: value for key, value in {code_of(node)}.items()}}'))
            plan.change(call, "model.dataparallel_keys", f"`{facts.code(call)}` read the "
                        "DataParallel wrapper's state, keys `module.*`: kept so (the "
                        "checkpoint loads where the original's did)")
        elif call.args:
            plan.rewrite(call, _strip_module_keys)
            plan.change(call, "model.dataparallel_keys", f"`{facts.code(call.func)}(...)` "
                        "loaded into the DataParallel wrapper (keys `module.*`): they go into "
                        "the model itself without the prefix")


def _type_checks(ctx: Context) -> None:
    facts, plan, ddp = ctx.facts, ctx.plan, ctx.names.ddp
    for node in [*facts.names, *facts.attributes]:
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            continue
        if isinstance(parent, cst.Call) and parent.func is node:
            continue
        if facts.qualname(node) in DATA_PARALLEL:
            if any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in facts.ancestors(node)):
                continue
            ctx.need("ddp", at=node)
            plan.rewrite(node, lambda _n: cst.Name(ddp))
            plan.change(node, "model.dataparallel_type_check",
                        f"`DataParallel` in a type check -> `{ddp}`")


def _drop_module_attribute(ctx: Context) -> None:
    """`model.module` read after DataParallel was removed: the model itself."""
    facts, flow = ctx.facts, ctx.flow
    roots = {flow.root(m.place) for m in ctx.models}
    for node in facts.attributes:
        if node.attr.value != "module" or not isinstance(node.value, (cst.Name, cst.Attribute)):
            continue
        place = flow.place_of(node.value)
        owner = facts.function(node)
        if place is None or flow.root(place) not in roots or owner is not None and \
                ctx.holds_wrapper(owner, dotted(node.value) or ""):
            continue
        ctx.plan.rewrite(node, lambda n: n.value.with_changes())  # type: ignore[attr-defined]
        ctx.plan.change(node, "model.dataparallel_module",
                        f"`{facts.code(node)}` -> `{facts.code(node.value)}`: "
                        "no DataParallel wrapper any more")


def _to_ddp(ctx: Context, call: cst.Call) -> Rewrite:
    ddp, rank = ctx.names.ddp, ctx.names.local_rank
    ctx.need("ddp", at=call)

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        code = code_of(node.args[0].value)
        devices = "" if ctx.on_cpu else \
            f", device_ids=[{rank}] if torch.cuda.is_available() else None"
        return expression(f"{ddp}({code}{devices})")

    return rewrite


_FLAG = "distrun_dataparallel"  # set on a model where its conditional DataParallel was


def _flag_assignment(target: str) -> Rewrite:
    def make(_node: cst.CSTNode) -> cst.CSTNode:
        line = cst.parse_statement(f"{target}.{_FLAG} = True\n")
        assert isinstance(line, cst.SimpleStatementLine)
        return line.body[0]
    return make


def _prefix_if_flagged(owner: str) -> Rewrite:
    def make(node: cst.CSTNode) -> cst.CSTNode:
        return expression(f'{{("module." if getattr({owner}, "{_FLAG}", False) else "") + '
                          f'key: value for key, value in {code_of(node)}.items()}}')
    return make


def _state_reads(ctx: Context, wrapped_at: list[tuple[cst.CSTNode, Place]]
                 ) -> list[tuple[cst.Call, str]]:
    """(call, method) of each `state_dict()` / `load_state_dict()` of a DataParallel
    wrapper's name after the wrap (the very name, not `model.module`)."""
    facts, flow = ctx.facts, ctx.flow
    found = []
    for call in facts.calls:
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if method not in ("state_dict", "load_state_dict") or not isinstance(
                call.func, cst.Attribute):
            continue
        place = flow.place_of(call.func.value)
        if any(place == wrapped and (
                facts.scope(call) is not facts.scope(stmt) or facts.line(call) > facts.line(stmt))
               for stmt, wrapped in wrapped_at):
            found.append((call, method))
    return found


def _under_condition(facts: Facts, stmt: cst.CSTNode) -> bool:
    """Is `stmt` under an `if` of its own function (or of the module's top level)?"""
    scope = facts.scope(stmt)
    for anc in facts.ancestors(stmt):
        if anc is scope:
            return False
        if isinstance(anc, cst.If) and facts.module_of(stmt).main_guard is not anc:
            return True
    return False


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


def _strip_module_keys(node: cst.CSTNode) -> cst.CSTNode:
    """`m.load_state_dict(state, ...)` -> the same with `module.` taken off the keys (the
    state as it is after its own rewrites: a `map_location` added, say)."""
    assert isinstance(node, cst.Call) and node.args
    first = node.args[0]
    stripped = expression(f'{{key.removeprefix("module."): value for key, value in '
                          f'{code_of(first.value)}.items()}}')
    return node.with_changes(args=[first.with_changes(value=stripped), *node.args[1:]])
