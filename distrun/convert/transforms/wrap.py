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
from distrun.convert.build import expression, statement
from distrun.convert.context import Context
from distrun.convert.flow import Place
from distrun.convert.idioms import MOVES, method_name
from distrun.convert.models import Home, Model, home_of

_REACH_DEPTH = 6


def plan_wraps(ctx: Context, model: Model) -> None:
    from distrun.convert.transforms.model import unwrap_param_uses

    homes = list(dict.fromkeys(model.homes.values()))
    ddp_names = {home: _ddp_name(ctx, home) for home in homes if home.kind != "param"}
    direct: dict[Home, list[cst.CSTNode]] = {home: [] for home in homes}
    for call in model.forwards:
        home = model.homes.get(id(call))
        if home is None:
            continue
        direct[home].append(call)
        if home.kind != "param":
            _call_through(ctx, call, home, ddp_names[home])
        else:
            ctx.ddp_calls[id(call)] = ctx.facts.code(_called(call))
    for home in homes:
        if home.kind == "param":
            ctx.ddp_params.add((id(home.scope), home.name))
            _pass_ddp(ctx, model, home, ddp_names, direct)
            unwrap_param_uses(ctx, model, home)
    moved = _moved(ctx, model)
    for home, sites in direct.items():
        if home.kind != "param" and sites:
            _create(ctx, model, home, ddp_names[home], sites, moved)


def _ddp_name(ctx: Context, home: Home) -> str:
    base = f"{home.name}_engine" if ctx.deepspeed else f"ddp_{home.name}"
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


def _call_through(ctx: Context, call: cst.Call, home: Home, ddp: str) -> None:
    target = _called(call)
    code = ddp_code(ctx, home, ddp, ctx.facts.code(target))
    ctx.ddp_calls[id(call)] = code
    ctx.plan.rewrite(target, lambda _n: expression(code))
    ctx.plan.change(call, "model", f"training forward pass `{ctx.facts.code(target)}(...)` -> "
                    f"`{code}(...)`: its gradients are averaged across ranks")


def _pass_ddp(ctx: Context, model: Model, home: Home, ddp_names: dict[Home, str],
              direct: dict[Home, list[cst.CSTNode]]) -> None:
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
            ctx.ddp_arguments.add(id(holder))
        if caller is None:
            ctx.plan.finding(site, "model", f"`{facts.code(arg)}` is passed to "
                             f"`{home.scope.name.value}()`, which trains it, but has no DDP "
                             "object here: not synchronised", "pass the DDP-wrapped model")
            continue
        direct.setdefault(caller, []).append(site)
        if caller.kind == "param":
            continue
        if caller not in ddp_names:
            ddp_names[caller] = _ddp_name(ctx, caller)
        code = ddp_code(ctx, caller, ddp_names[caller], facts.code(flow.strip(arg)))
        ctx.plan.rewrite(arg, lambda _n, code=code: expression(code))  # type: ignore[misc]
        ctx.plan.change(site, "model", f"`{home.scope.name.value}()` trains the model it is "
                        f"given: it now gets `{code}`")


def _moved(ctx: Context, model: Model) -> bool:
    """Is the model visibly moved to a device somewhere (`.to(...)`, `.cuda()`)?"""
    flow = ctx.flow
    roots = {flow.root(p) for p in model.component}
    for call in ctx.facts.calls:
        if method_name(call) not in MOVES or not isinstance(call.func, cst.Attribute):
            continue
        place = flow.place_of(flow.strip(call.func.value))
        assign = ctx.facts.parent.get(call)
        if place is None and isinstance(assign, cst.Assign) and assign.value is call:
            place = flow.place_of(assign.targets[0].target)  # model = Net().to(device)
        if place is not None and flow.root(place) in roots:
            return True
    return False


def _create(ctx: Context, model: Model, home: Home, ddp: str, sites: list[cst.CSTNode],
            moved: bool) -> None:
    facts = ctx.facts
    reaching = _reaching_functions(ctx, sites)
    blocks = list(_binding_blocks(ctx, home))
    if not blocks:
        ctx.plan.finding(sites[0], "model", f"found where `{home.name}` is trained but not where "
                         "it is set: not wrapped", f"wrap it after it is built: "
                         f"`{ddp} = DDP({home.name}, device_ids=[LOCAL_RANK])`")
        return
    for block, place in blocks:
        anchors = _walk(ctx, block, place, sites, reaching)
        for anchor, after in anchors:
            _insert(ctx, model, home, ddp, anchor, after, moved)
    if home.kind == "name" and isinstance(home.scope, cst.Module) and not facts.module_of(
            home.scope).is_entry:
        ctx.plan.finding(sites[0], "model", f"`{home.name}` is a global of an imported module: "
                         "its DDP object is made when that module is imported, before the "
                         "process group exists", "build the model in a function called by the "
                         "entry script, or move `{ddp} = DDP(...)` into it")


def _binding_blocks(ctx: Context, home: Home) -> Iterator[tuple[list[cst.BaseStatement], Place]]:
    """The blocks whose statements set the home: a function's or module's body, or each
    method of the class family that sets `self.<name>`."""
    facts, flow = ctx.facts, ctx.flow
    if home.kind == "name":
        body = home.scope.body.body if isinstance(home.scope, cst.FunctionDef) \
            and isinstance(home.scope.body, cst.IndentedBlock) else getattr(home.scope, "body", [])
        yield list(body), Place(home.scope, home.name)
        return
    place = Place(home.scope, f"self.{home.name}")
    methods = []
    for node in facts.attributes:
        if isinstance(facts.parent.get(node), cst.AssignTarget) and flow.place_of(node) == place:
            method = facts.function(node)
            if method is not None and method not in methods:
                methods.append(method)
    for method in methods:
        if isinstance(method.body, cst.IndentedBlock):
            yield list(method.body.body), place


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
            valid, last_bind = False, stmt
            if reaches:  # set and trained in one compound statement: make it inside
                inner = list(_inner_block(stmt))
                if inner:
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
    """Does `stmt` assign the place (`model = ...`, `self.model = ...`) anywhere in it?"""
    return any(ctx.facts.inside(target, stmt) for target in ctx.flow.bindings(place))


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


def _prepare(ctx: Context, model: Model, target: str, name: str, anchor: cst.CSTNode,
             after: bool) -> cst.BaseStatement:
    """accelerate: `ddp_model, optimizer, loader = accelerator.prepare(model, optimizer,
    loader)` when the optimizer and the loaders were built before, in the same function
    (prepared together after the model exists, the loaders draw from the random generator
    where the original script does not: its model starts from the same weights); else
    the model alone here, and the optimizer where it is built."""
    facts, plan, acc = ctx.facts, ctx.plan, ctx.names.accelerator
    if not isinstance(model.optimizer, cst.Call):  # updated by hand: nothing to prepare
        return statement(f"{target} = {acc}.prepare({name})\n")
    built = facts.statement(model.optimizer)
    small = built.body[0] if isinstance(built, cst.SimpleStatementLine) else None
    optimizer = None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        optimizer = dotted(small.targets[0].target)
    if optimizer is None or id(model.optimizer) in ctx.prepared:
        return statement(f"{target} = {acc}.prepare({name})\n")
    ctx.prepared.add(id(model.optimizer))
    assert built is not None
    together = facts.scope(built) is facts.scope(anchor) and (
        facts.line(built) < facts.line(anchor) or after and facts.line(built) <= facts.line(
            anchor))
    at = anchor if together else built
    loaders = [entry for entry in ctx.loaders_to_prepare if entry.name
               and facts.scope(entry.call) is facts.scope(at)
               and facts.line(entry.call) < facts.line(at)]
    for entry in loaders:
        ctx.loaders_to_prepare.remove(entry)
    others = [optimizer, *[entry.name for entry in loaders if entry.name]]
    sharded = ": the loaders are sharded, each process reads its own batches" if loaders else ""
    where = "with the model" if together else "after the optimizer is built"
    plan.change(at, "model", f"{', '.join(f'`{o}`' for o in others)} prepared by accelerate "
                f"{where}{sharded}")
    if loaders:
        plan.shards_batches(at)
    if not together:
        joined = ", ".join(others)
        plan.insert_after(built, [statement(f"{joined} = {acc}.prepare({joined})\n")])
        return statement(f"{target} = {acc}.prepare({name})\n")
    targets, sources = ", ".join([target, *others]), ", ".join([name, *others])
    return statement(f"{targets} = {acc}.prepare({sources})\n")


def _insert(ctx: Context, model: Model, home: Home, ddp: str, anchor: cst.CSTNode,
            after: bool, moved: bool) -> None:
    facts, plan, n = ctx.facts, ctx.plan, ctx.names
    name = home.name if home.kind == "name" else f"self.{home.name}"
    target = ddp if home.kind == "name" else f"self.{ddp}"
    guard = facts.module_of(anchor).main_guard
    if anchor is guard and not after and isinstance(guard.body, cst.IndentedBlock):
        anchor = guard.body.body[0]  # inside the guard: the process group is set up there
    inner = name if moved or ctx.accelerate else f"{name}.to({n.device})"
    new = []
    if ctx.options.sync_bn:
        new.append(statement(f"if torch.cuda.is_available():  # SyncBatchNorm runs on GPU only\n"
                             f"    {name} = torch.nn.SyncBatchNorm.convert_sync_batchnorm("
                             f"{name})\n"))
        plan.change(anchor, "sync-bn", f"BatchNorm layers of `{name}` -> SyncBatchNorm when "
                    "CUDA is available")
        plan.finding(anchor, "sync-bn", "SyncBatchNorm is used only with CUDA: on CPU each "
                     "rank keeps its own BatchNorm statistics", severity="info")
    if ctx.accelerate:
        new.append(_prepare(ctx, model, target, name, anchor, after))
    elif ctx.deepspeed:
        from distrun.convert.transforms.deepspeed import initialize

        found = initialize(ctx, model, home, target, name, anchor, after)
        if found is None:
            return
        new.append(found[0])
        anchor, after = found[1], found[2]
    else:
        new.append(statement(f"{target} = {n.ddp}({inner}, device_ids=[{n.local_rank}] "
                             f"if torch.cuda.is_available() else None)\n"))
        ctx.need("ddp", at=anchor)
    if after:
        plan.insert_after(anchor, new)
    else:
        plan.insert_before(anchor, new)
    what = ("accelerate's DDP object" if ctx.accelerate else "DeepSpeed engine" if ctx.deepspeed
            else "DistributedDataParallel object")
    plan.change(anchor, "model", f"`{target}`: the {what} of `{name}` (on its device); the "
                f"training forward passes call it, every other use of `{name}` stays on the "
                "model itself")
