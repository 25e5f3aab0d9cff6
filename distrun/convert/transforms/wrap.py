"""Where each model's DistributedDataParallel object is made, and the calls that use it
(part of the model transform; see `transforms/model.py` and `convert/models.py`).

For each home of a model's training forward passes:
  - `name` (`model` in a function or module) -> `ddp_model = DDP(model, ...)` in that
    block, after the statements that build, move and load the model, before the first
    statement that trains it (again after a statement that rebinds the model, when
    training follows); at the top of `if __name__ == "__main__":` when that is the
    first statement that trains it;
  - `class` (`self.model`) -> `self.ddp_model = DDP(self.model, ...)` in each method
    that sets `self.model`, after it sets it;
  - `param` (`def train(model)`) -> each call passes the DDP object its caller holds.
Training forward passes then call the DDP object.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, WrapSite
from distrun.convert.layers import sync_bn_lines
from distrun.convert.models import Home, Model, home_of, is_moved
from distrun.convert.object_flow import Place
from distrun.convert.syntax import walk

# Attributes that DistributedDataParallel answers itself, exactly as the module would.
PASS_THROUGH = frozenset({
    "module", "parameters", "named_parameters", "buffers", "named_buffers", "children",
    "named_children", "modules", "named_modules", "train", "eval", "training", "zero_grad",
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "requires_grad_", "no_sync",
    "register_comm_hook", "apply", "forward", "join", "type",
})

_REACH_DEPTH = 6


def plan_wraps(ctx: Context, model: Model) -> None:
    homes = list(dict.fromkeys(model.homes.values()))
    ddp_names = {home: _ddp_name(ctx, home) for home in homes if home.kind != "param"}
    direct: dict[Home, list[cst.CSTNode]] = {home: [] for home in homes}
    for call in model.forwards:
        home = model.homes.get(call)
        if home is None:
            continue
        direct[home].append(call)
        if home.kind != "param":
            _call_through(ctx, model, call, home, ddp_names[home])
        else:
            model.wrapped.calls[call] = ctx.facts.code(_called(call))
    given = [home for home in homes if home.kind == "param"]
    for home in given:
        assert isinstance(home.scope, cst.FunctionDef)
        model.wrapped.parameters.add((home.scope, home.name))
    for home in list(given):
        _pass_ddp(ctx, model, home, ddp_names, direct, given)
    for home in given:  # once every function that hands the DDP object on is known
        unwrap_param_uses(ctx, model, home)
    moved = is_moved(ctx.facts, ctx.flow, model)
    for home, sites in direct.items():
        if home.kind != "param" and sites:
            _create(ctx, model, home, ddp_names[home], sites, moved)
    if model.forwards and not any(h.kind != "param" and sites for h, sites in direct.items()) \
            and not ctx.plan.found("model.no_wrapper_here"):
        ctx.plan.finding(model.forwards[0], "model.no_wrapper_here",
                         f"`{model.place.code}` is trained here through a function parameter, "
                         "but no caller that holds the model was found to give it a DDP "
                         "object: not synchronised", "wrap the model where it is built, "
                         "`ddp_model = DDP(model, device_ids=[LOCAL_RANK])`, and pass `ddp_model`")


def _ddp_name(ctx: Context, home: Home) -> str:
    base = ctx.target.wrapped_name(home.name)
    if home.kind == "name":
        return ctx.names.fresh(base)
    taken = {p.code for p in ctx.flow.places() if p.scope is home.scope}
    name = base
    while f"self.{name}" in taken:
        name = f"{name}_"
    return name


def _called(call: cst.Call) -> cst.BaseExpression:
    """The model expression of a forward call: `model` in `model(x)` and `model.forward(x)`."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        return func.value
    return func


def ddp_code(ctx: Context, home: Home, ddp: str, model_code: str) -> str:
    """The DDP object, seen where the model is written `model_code`."""
    if home.kind == "class":
        prefix = model_code.rpartition(".")[0]
        return f"{prefix}.{ddp}"
    return ddp


def _call_through(ctx: Context, model: Model, call: cst.Call, home: Home, ddp: str) -> None:
    target = _called(call)
    code = ddp_code(ctx, home, ddp, ctx.facts.code(target))
    model.wrapped.calls[call] = code
    ctx.plan.rewrite(target, lambda _n: expression(code))
    ctx.plan.change(call, "model.forward",
                    f"training forward pass `{ctx.facts.code(target)}(...)` -> "
                    f"`{code}(...)`: its gradients are averaged across ranks")


def _pass_ddp(ctx: Context, model: Model, home: Home, ddp_names: dict[Home, str],
              direct: dict[Home, list[cst.CSTNode]], given: list[Home]) -> None:
    """Callers of a function that trains the model it receives pass the DDP object."""
    facts, flow = ctx.facts, ctx.flow
    assert isinstance(home.scope, cst.FunctionDef)
    for site, is_method in flow.call_sites(home.scope):
        arg = facts.argument_for(site, home.scope, is_method, home.name)
        if arg is None:
            continue
        place = flow.place_of(flow.strip(arg))
        if place is None or flow.root(place) not in {flow.root(p) for p in model.component}:
            continue
        holder = facts.parent.get(arg)
        caller = home_of(facts, flow, flow.strip(arg), place)
        if holder is not None:
            model.wrapped.handed_on.add(holder)
        if caller is None:
            ctx.plan.finding(site, "model.no_wrapper_here", f"`{facts.code(arg)}` is passed to "
                             f"`{home.scope.name.value}()`, which trains it, but has no DDP "
                             "object here: not synchronised", "pass the DDP-wrapped model")
            continue
        direct.setdefault(caller, []).append(site)
        if caller.kind == "param":  # handed on again: `outer(model)` -> `inner(model)`
            if (caller.scope, caller.name) not in model.wrapped.parameters:
                assert isinstance(caller.scope, cst.FunctionDef)
                model.wrapped.parameters.add((caller.scope, caller.name))
                given.append(caller)
                _pass_ddp(ctx, model, caller, ddp_names, direct, given)  # its callers pass it
            continue
        if caller not in ddp_names:
            ddp_names[caller] = _ddp_name(ctx, caller)
        code = ddp_code(ctx, caller, ddp_names[caller], facts.code(flow.strip(arg)))
        ctx.plan.rewrite(arg, lambda _n, code=code: expression(code))  # type: ignore[misc]
        ctx.plan.change(site, "model.pass_wrapper",
                        f"`{home.scope.name.value}()` trains the model it is "
                        f"given: it now gets `{code}`")


def _create(ctx: Context, model: Model, home: Home, ddp: str, sites: list[cst.CSTNode],
            moved: bool) -> None:
    facts = ctx.facts
    reaching = _reaching_functions(ctx, sites)
    blocks = list(_binding_blocks(ctx, home))
    if not blocks:
        ctx.plan.finding(sites[0], "model.not_set",
                         f"found where `{home.name}` is trained but not where "
                         "it is set: not wrapped", f"wrap it after it is built: "
                         f"`{ddp} = DDP({home.name}, device_ids=[LOCAL_RANK])`")
        return
    for block, place in blocks:
        anchors = _walk(ctx, block, place, sites, reaching)
        for anchor, after in anchors:
            _insert(ctx, model, home, ddp, anchor, after, moved)
    if home.kind == "name" and isinstance(home.scope, cst.Module) and not facts.module_of(
            home.scope).is_entry:
        ctx.plan.finding(sites[0], "model.global_of_module",
                         f"`{home.name}` is a global of an imported module: "
                         "its DDP object is made when that module is imported, before the "
                         "process group exists", "build the model in a function called by the "
                         "entry script, or move `{ddp} = DDP(...)` into it")


def _binding_blocks(ctx: Context, home: Home) -> Iterator[tuple[list[cst.BaseStatement], Place]]:
    """The blocks whose statements set the home: a function's or module's body, or each
    method of the class family that sets `self.<name>` to something that may be a model
    (not `self.model = None` in `__init__`, a placeholder until `build_model()` runs)."""
    facts, flow = ctx.facts, ctx.flow
    if home.kind == "name":
        body = home.scope.body.body if isinstance(home.scope, cst.FunctionDef) \
            and isinstance(home.scope.body, cst.IndentedBlock) else getattr(home.scope, "body", [])
        yield list(body), Place(home.scope, home.name)
        return
    place = Place(home.scope, f"self.{home.name}")
    methods = []
    for node in facts.attributes:
        if _assigned_to(facts, node) and flow.place_of(node) == place \
                and not flow.placeholder(node):
            method = facts.function(node)
            if method is not None and method not in methods:
                methods.append(method)
    for target in flow.bindings(place):  # `self.__dict__.update(kwargs)`
        method = facts.function(target) if isinstance(target, cst.Call) else None
        if method is not None and method not in methods:
            methods.append(method)
    for method in methods:
        if isinstance(method.body, cst.IndentedBlock):
            yield list(method.body.body), place


def _assigned_to(facts: Facts, node: cst.CSTNode) -> bool:
    """Is `node` an assignment's target, alone or in a tuple (`self.model, self.opt = m, o`)?"""
    parent = facts.parent.get(node)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
        parent = facts.parent.get(parent)
    return isinstance(parent, cst.AssignTarget)


def _walk(ctx: Context, block: list[cst.BaseStatement], place: Place,
          sites: list[cst.CSTNode], reaching: set[int]) -> list[tuple[cst.CSTNode, bool]]:
    """Where to make the DDP object in `block`: before each statement that trains the
    model while no DDP object of its current value exists; else after the block's last
    statement that sets it (statements after which nothing in the block trains it)."""
    facts = ctx.facts
    anchors: list[tuple[cst.CSTNode, bool]] = []
    valid, last_bind, reached = False, None, False
    for stmt in block:
        binds = _binds(ctx, stmt, place)
        reaches = _reaches(facts, ctx, stmt, sites, reaching)
        reached = reached or reaches
        if binds:
            inner = list(_inner_block(stmt)) if reaches else []
            if reaches and not inner and not valid:
                # `model, losses = train(model)`: trained by the value, then rebound
                anchors.append((stmt, False))
            valid, last_bind = False, stmt
            if inner:  # set and trained in one compound statement: make it inside
                anchors += _walk(ctx, inner, place, sites, reaching)
                valid = True
            continue
        if reaches and not valid:
            anchors.append((stmt, False))
            valid = True
    if not valid and not reached and last_bind is not None:
        tail = block[-1]
        if isinstance(tail, cst.SimpleStatementLine) and isinstance(tail.body[0], cst.Return) \
                and tail is not last_bind:
            anchors.append((tail, False))
        else:
            anchors.append((tail, True))
    return anchors


def _inner_block(stmt: cst.CSTNode) -> list[cst.BaseStatement]:
    body = getattr(stmt, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else []


def _binds(ctx: Context, stmt: cst.CSTNode, place: Place) -> bool:
    """Does `stmt` assign the place (`model = ...`, `self.model = ...`) anywhere in it, with
    something that may be a model (not a placeholder such as `model = None`), or take it
    as its loop target (`for model, label in models:`: each model of a list trained in
    turn gets its DDP object inside the loop, where it is bound)?"""
    if isinstance(stmt, cst.For) and any(
            isinstance(node, cst.Name) and ctx.flow.place_of(node) == place
            for node in walk(stmt.target)):
        return True
    return any(ctx.facts.inside(target, stmt) and not ctx.flow.placeholder(target)
               and not _itself(ctx, target) for target in ctx.flow.bindings(place))


# Module methods that return the module itself: `model = model.train()` is no new model
_SELF_RETURNING = frozenset({"train", "eval", "to", "cuda", "cpu", "float", "double", "half",
                             "bfloat16", "requires_grad_", "apply", "type"})


def _itself(ctx: Context, target: cst.CSTNode) -> bool:
    """Is `target` given its own value back (`classifier = classifier.train()`)?"""
    assign = ctx.facts.parent.get(ctx.facts.parent.get(target, target))
    value = assign.value if isinstance(assign, cst.Assign) else None
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
            value.func.attr.value in _SELF_RETURNING:
        value = value.func.value
        if isinstance(target, cst.BaseExpression) and dotted(value) == dotted(target):
            return True
    return False


def _reaches(facts: Facts, ctx: Context, stmt: cst.CSTNode, sites: list[cst.CSTNode],
             reaching: set[int]) -> bool:
    """Does running `stmt` train the model (a definition runs nothing)?"""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return False
    if any(facts.inside(site, stmt) for site in sites):
        return True
    return any((found := ctx.flow.callee(c)) is not None and id(found[0]) in reaching
               for c in facts.calls_in(stmt))


def _reaching_functions(ctx: Context, sites: list[cst.CSTNode]) -> set[int]:
    """ids of the functions that contain a site, and of those that call them."""
    facts, flow = ctx.facts, ctx.flow
    found: set[int] = set()
    todo = [f for s in sites if (f := facts.function(s)) is not None]
    depth = 0
    while todo and depth < _REACH_DEPTH:
        nxt = []
        for func in todo:
            if id(func) in found:
                continue
            found.add(id(func))
            nxt += [f for site, _ in flow.call_sites(func)
                    if (f := facts.function(site)) is not None]
        todo, depth = nxt, depth + 1
    return found


def _insert(ctx: Context, model: Model, home: Home, ddp: str, anchor: cst.CSTNode,
            after: bool, moved: bool) -> None:
    facts, plan = ctx.facts, ctx.plan
    name = home.name if home.kind == "name" else f"self.{home.name}"
    target = ddp if home.kind == "name" else f"self.{ddp}"
    guard = facts.module_of(anchor).main_guard
    if anchor is guard and not after and isinstance(guard.body, cst.IndentedBlock):
        anchor = guard.body.body[0]  # inside the guard: the process group is set up there
    new = sync_bn_lines(ctx, model, name, anchor)
    made = ctx.target.wrap(ctx, WrapSite(model, home, target, name, anchor, after, moved))
    if made is None:
        return
    new += [*made.before, made.statement]
    anchor, after = made.anchor, made.after
    if after:
        plan.insert_after(anchor, new)
    else:
        plan.insert_before(anchor, new)
    plan.change(anchor, "model.wrap", f"`{target}`: the {ctx.target.wrapper} of `{name}` (on its "
                f"device); the training forward passes call it, every other use of `{name}` "
                "stays on the model itself")


def unwrap_param_uses(ctx: Context, model: Model, home: Home) -> None:
    """Inside a function given the DDP object as `home.name`: what is not a forward pass
    (attributes DDP does not answer, the object handed on) reaches the model inside."""
    facts, plan, flow, target = ctx.facts, ctx.plan, ctx.flow, ctx.target
    assert isinstance(home.scope, cst.FunctionDef)
    forwards = {c.func for c in model.forwards} | {
        c.func.value for c in model.forwards if isinstance(c.func, cst.Attribute)}
    for node in facts.names:
        if node.value != home.name or facts.function(node) is not home.scope:
            continue
        if flow.place_of(node) is None or node in forwards:
            continue
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            if parent.attr.value not in PASS_THROUGH:
                plan.rewrite(node, lambda n: expression(target.unwrap(ctx, code_of(n))))
                plan.change(parent, "model.unwrap", f"`{home.name}.{parent.attr.value}` -> "
                            f"`{target.unwrap(ctx, home.name)}.{parent.attr.value}` (it "
                            "holds the DDP object here)")
        elif parent is not None and (isinstance(parent, (cst.Arg, cst.Return)) or _returned_in(
                facts, parent)) and not _hands_ddp_on(ctx, parent):
            plan.rewrite(node, lambda n: expression(target.unwrap(ctx, code_of(n))))
            plan.change(node, "model.unwrap", f"`{home.name}` -> `{target.unwrap(ctx, home.name)}` "
                        "where it is handed on (it holds the DDP object here)")


def _returned_in(facts: Facts, node: cst.CSTNode | None) -> bool:
    """`node` is an element of a tuple or list returned as is (`return model, losses`)."""
    if not isinstance(node, cst.Element):
        return False
    holder = facts.parent.get(node)
    return isinstance(holder, (cst.Tuple, cst.List)) and isinstance(
        facts.parent.get(holder), cst.Return)


def _hands_ddp_on(ctx: Context, node: cst.CSTNode) -> bool:
    """Is this argument the DDP object passed on to a function that trains with it (or to
    isinstance/a type check)?"""
    call = ctx.facts.parent.get(node)
    if not isinstance(call, cst.Call):
        return False
    if ctx.facts.call_name(call) in ("isinstance", "type", "hasattr", "getattr"):
        return True
    return ctx.hands_wrapper_on(node)

