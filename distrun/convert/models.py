"""The models of a project and where they are trained, found across its modules.

A model is what an optimizer is built from (`SGD(model.parameters())`, a list filtered
from it, a method returning them). Through `flow.Flow` every name, attribute and parameter
that may hold it is known; every call of one of those is a forward pass, a *training*
pass unless it runs without gradients (`torch.no_grad()`, `torch.inference_mode()`, a
decorated function), or in a loop over batches whose body does not train, or in a
function that neither trains nor is called by one that does.

Each training pass has a *home*: where the DistributedDataParallel object it must call
can live so that the pass reaches it:
  - `class`: an attribute of the instances of a class (`self.model` -> `self.ddp_model`),
  - `name`: a name of a function or module (`model` -> `ddp_model`),
  - `param`: a parameter (`def train(model, ...)`): its callers pass the DDP object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import libcst as cst

from distrun.convert.analysis import Facts, dotted, walk
from distrun.convert.idioms import (
    MOVES,
    in_eval_mode,
    is_backward,
    is_optimizer,
    is_optimizer_step,
    method_name,
    steps_inside,
    unwrap_iter,
)
from distrun.convert.object_flow import Flow, Place
from distrun.convert.updaters import PARAMETERS, never_called, updated_by_hand

_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
                      "torch.autograd.grad_mode.no_grad",
                      "torch.autograd.grad_mode.inference_mode"})
# Methods that put parameters into a list (or set, dict) the optimizer is given.
_FILLS = frozenset({"append", "extend", "insert", "add", "update"})


@dataclass(frozen=True)
class Home:
    kind: Literal["class", "name", "param"]
    scope: cst.CSTNode  # ClassDef (its family's root), FunctionDef, or Module
    name: str  # the attribute, name or parameter

    def __repr__(self) -> str:
        scope = getattr(getattr(self.scope, "name", None), "value", "<module>")
        return f"Home({self.kind} {scope}.{self.name})"


@dataclass
class Model:
    """One model: where it is built and every forward pass of it."""

    place: Place  # the place the optimizer reads its parameters from
    optimizer: cst.Call | cst.For  # its optimizer, or the loop that updates it by hand
    component: set[Place]
    forwards: list[cst.Call] = field(default_factory=list)  # training forward passes
    other_calls: list[cst.Call] = field(default_factory=list)  # evaluation, no_grad...
    homes: dict[cst.Call, Home] = field(default_factory=dict)  # forward call -> its home
    unhomed: list[cst.Call] = field(default_factory=list)  # training passes with no home
    wrapped: Wrapped = field(default_factory=lambda: Wrapped())  # the model transform's result
    # --sync-bn: its BatchNorm layers become SyncBatchNorm ("found": the script builds
    # some; "unseen": what builds it is not all in the script; "": left as it is)
    sync_bn: Literal["", "found", "unseen"] = ""


@dataclass
class Wrapped:
    """What the model transform made of one model, for the transforms after it."""

    # forward call -> the code it now calls (the DDP object, the engine, or under FSDP2
    # the sharded model itself): every such call is a collective every rank must make
    calls: dict[cst.Call, str] = field(default_factory=dict)
    # arguments that hand the wrapper on to a function that trains with it
    handed_on: set[cst.CSTNode] = field(default_factory=set)
    # (function, parameter): the parameters that receive the wrapper
    parameters: set[tuple[cst.FunctionDef, str]] = field(default_factory=set)


def find_models(facts: Facts, flow: Flow) -> list[Model]:
    """Every model an optimizer trains, once each, with its forward passes."""
    models: list[Model] = []
    found: list[tuple[cst.Call | cst.For, cst.BaseExpression]] = [
        (call, receiver) for call in facts.calls if _builds_optimizer(facts, call)
        for receiver in _parameter_receivers(facts, call, flow)]
    found += updated_by_hand(facts)
    for updater, receiver in found:
        if never_called(facts, updater):
            continue  # an optimizer factory the project never calls (AGCRN's init_optim)
        module = facts.module_of(updater)
        if not module.is_entry and module.main_guard is not None and facts.inside(
                updater, module.main_guard):
            continue  # an imported module's own demo: its main guard never runs on import
        place = _model_place(facts, flow, receiver)
        if place is None or any(flow.same(place, m.place) for m in models):
            continue
        model = Model(place, updater, flow.component(place))
        _find_forwards(facts, flow, model)
        models.append(model)
    return models


def _builds_optimizer(facts: Facts, call: cst.Call) -> bool:
    """`torch.optim.X(...)`, or a factory given `torch.optim` and parameters
    (`config.init_obj('optimizer', torch.optim, params)`, `getattr(torch.optim, n)(...)`)."""
    if is_optimizer(facts, call):
        return True
    func = call.func
    if isinstance(func, cst.Call) and facts.call_name(func) == "getattr" and func.args \
            and facts.qualname(func.args[0].value) == "torch.optim":
        return True
    return any(facts.qualname(a.value) == "torch.optim" for a in call.args) and bool(
        _parameter_receivers(facts, call))


def _parameter_receivers(facts: Facts, call: cst.Call, flow: Flow | None = None
                         ) -> list[cst.BaseExpression]:
    """What `.parameters()` is called on in the optimizer's arguments, also through what
    the names there are built from in the same function (`_sources`: `params =
    filter(..., model.parameters())`, minGPT's `param_dict = {pn: p for pn, p in
    self.named_parameters()}` then `optim_groups`, a list filled in a loop), and through
    what a function of the project returns (`SGD(trainable(model))`)."""
    return _receivers_from(facts, call, facts.scope(call), 0, flow)


def parameters_in(facts: Facts, node: cst.CSTNode, flow: Flow) -> list[cst.BaseExpression]:
    """What `.parameters()` is called on in `node`, as for an optimizer's arguments."""
    return _receivers_from(facts, node, facts.scope(node), 0, flow)


_SUBMODULES = frozenset({"named_modules", "modules", "children", "named_children"})


def _whole_models(facts: Facts, scope: cst.CSTNode, found: list[cst.BaseExpression]
                  ) -> list[cst.BaseExpression]:
    """A receiver that is a loop variable over a model's submodules (`for mn, m in
    self.named_modules(): for pn, p in m.named_parameters()`, minGPT's weight-decay
    groups) stands for that model: its parameters are the model's."""
    out: list[cst.BaseExpression] = []
    for receiver in found:
        whole: cst.BaseExpression = receiver
        if isinstance(receiver, cst.Name):
            for loop in facts.for_loops:
                source = loop.iter
                if (facts.scope(loop) is scope and receiver.value in _names_in(loop.target)
                        and isinstance(source, cst.Call)
                        and isinstance(source.func, cst.Attribute)
                        and source.func.attr.value in _SUBMODULES):
                    whole = source.func.value
                    break
        if not any(facts.code(whole) == facts.code(o) for o in out):
            out.append(whole)
    return out


def _receivers_from(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode, depth: int,
                    flow: Flow | None = None) -> list[cst.BaseExpression]:
    return _whole_models(facts, scope, _receivers_found(facts, node, scope, depth, flow))


def _receivers_found(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode, depth: int,
                     flow: Flow | None = None) -> list[cst.BaseExpression]:
    found = _receivers_in(facts, node)
    names = _names_in(node)
    seen: set[str] = set()
    visited = [node]
    for _ in range(4):
        if found or not names - seen:
            break
        new = names - seen
        seen |= names
        for source in _sources(facts, scope, new):
            visited.append(source)
            found += _receivers_in(facts, source)
            names = names | _names_in(source)
    if found or depth >= 2:
        return found
    for part in visited:  # `params = trainable(model)`, `SGD(model.weights())`: returned
        for inner in facts.calls_in(part):
            callee = facts.callee(inner) or (flow.callee(inner) if flow is not None else None)
            if callee is None or callee[0] is scope:
                continue
            given = [r.value for r in facts.returns if r.value is not None
                     and facts.function(r) is callee[0]]
            given += [y.value for y in walk(callee[0]) if isinstance(y, cst.Yield)
                      and isinstance(y.value, cst.BaseExpression)
                      and facts.function(y) is callee[0]]
            for value in given:
                found += _receivers_from(facts, value, callee[0], depth + 1, flow)
    return found


def _sources(facts: Facts, scope: cst.CSTNode, names: set[str]) -> list[cst.CSTNode]:
    """What the names in `names` are built from in `scope`: the values assigned to them
    (`=`, `+=`), what is put into them (`params.append(p)`, `.extend(...)`,
    `.insert(i, p)`, `groups.append({"params": decay})`), and for a loop variable what
    the loop goes over (`for name, p in model.named_parameters():`)."""
    found: list[cst.CSTNode] = []
    for assign in facts.assigns:
        if isinstance(assign, cst.Assign) and facts.scope(assign) is scope and any(
                dotted(t.target) in names for t in assign.targets):
            found.append(assign.value)
    for name in facts.names:
        parent = facts.parent.get(name)
        if name.value not in names or facts.scope(name) is not scope:
            continue
        if isinstance(parent, cst.AugAssign) and parent.target is name:
            found.append(parent.value)
        elif isinstance(parent, cst.Attribute) and parent.value is name \
                and parent.attr.value in _FILLS:
            call = facts.parent.get(parent)
            if isinstance(call, cst.Call) and call.func is parent:
                found += [arg.value for arg in call.args]
    for loop in facts.for_loops:
        if facts.scope(loop) is scope and _names_in(loop.target) & names:
            found.append(loop.iter)
    return found


def _receivers_in(facts: Facts, node: cst.CSTNode) -> list[cst.BaseExpression]:
    return [inner.func.value for inner in facts.calls_in(node)
            if isinstance(inner.func, cst.Attribute) and inner.func.attr.value in PARAMETERS]


def _model_place(facts: Facts, flow: Flow, receiver: cst.BaseExpression) -> Place | None:
    """The model whose parameters these are: `model` for `model.fc.parameters()` when
    `model` itself is called somewhere (the head of a model, fine-tuned alone)."""
    place = flow.place_of(receiver)
    if place is None:
        return None
    while "." in place.code and not place.code.endswith(".self"):
        prefix = Place(place.scope, place.code.rpartition(".")[0])
        if prefix.code == "self" or not _is_called(facts, flow, prefix):
            break
        place = prefix
    return place


def _is_called(facts: Facts, flow: Flow, place: Place) -> bool:
    return any(flow.same(flow.place_of(c.func), place) for c in facts.calls
               if isinstance(c.func, (cst.Name, cst.Attribute)))


def _find_forwards(facts: Facts, flow: Flow, model: Model) -> None:
    members = {flow.root(model.place)}
    for call in facts.calls:
        func = call.func
        target = func.value if isinstance(func, cst.Attribute) and func.attr.value == "forward" \
            else func
        if not isinstance(target, (cst.Name, cst.Attribute)) or dotted(target) == "self":
            continue  # a method of the model running its own forward: the caller's business
        place = flow.place_of(target)
        if place is None or flow.root(place) not in members:
            continue
        if _is_training(facts, flow, call):
            model.forwards.append(call)
            home = home_of(facts, flow, target, place)
            if home is None:
                model.unhomed.append(call)
            else:
                model.homes[call] = home
        else:
            model.other_calls.append(call)


def _is_training(facts: Facts, flow: Flow, call: cst.Call) -> bool:
    if without_gradients(facts, call) or in_eval_mode(facts, call) and not feeds_backward(
            facts, call):  # (a model trained in eval mode, its BatchNorm frozen, trains)
        return False
    func = facts.function(call)
    loop = next(iter(facts.enclosing_loops(call)), None)
    if isinstance(loop, cst.For) and dotted(unwrap_iter(facts, loop.iter)) is not None \
            and not _trains_directly(facts, loop.body, flow):
        return False  # a loop over batches that does not train: evaluation
    if func is None:
        top = facts.top_level_statement(call)
        return _trains_directly(facts, top, flow)
    if _trains_directly(facts, func, flow):
        return True
    return any(feeds_backward(facts, site) for site, _ in flow.call_sites(func))


def feeds_backward(facts: Facts, site: cst.Call) -> bool:
    """Does the result of `site` (a call of a helper: `loss = compute_loss(model, x)`) go
    into a backward pass of its function?"""
    scope = facts.function(site) or facts.top_level_statement(site)
    stmt = facts.statement(site)
    if stmt is None:
        return False
    if any(is_backward(c) for c in facts.calls_in(stmt)):
        return True
    tainted = _assigned_names(facts, stmt)
    after = facts.line(stmt)
    for assign in facts.assigns:  # in source order: names computed from the result
        if facts.line(assign) > after and facts.inside(assign, scope) and assign.value \
                is not None and _names_in(assign.value) & tainted:
            tainted |= _assigned_names(facts, assign)
    return any(is_backward(c) and facts.line(c) >= after and facts.inside(c, scope)
               and _names_in(c) & tainted for c in facts.calls_in(scope))


def _assigned_names(facts: Facts, node: cst.CSTNode) -> set[str]:
    """Names assigned anywhere in `node`."""
    names: set[str] = set()
    for assign in facts.assigns:
        if facts.inside(assign, node):
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) \
                else [assign.target]
            for target in targets:
                names |= _names_in(target)
    return names


def _names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def _trains_directly(facts: Facts, container: cst.CSTNode, flow: Flow) -> bool:
    return any(is_backward(c) or is_optimizer_step(c) or steps_inside(facts, flow, c)
               for c in facts.calls_in(container))


def without_gradients(facts: Facts, node: cst.CSTNode) -> bool:
    for anc in facts.ancestors(node):
        if isinstance(anc, cst.With) and any(
                isinstance(item.item, cst.Call) and facts.call_name(item.item) in _NO_GRAD
                for item in anc.items):
            return True
        if isinstance(anc, cst.FunctionDef) and any(
                facts.qualname(d.decorator.func if isinstance(d.decorator, cst.Call)
                               else d.decorator) in _NO_GRAD for d in anc.decorators):
            return True
    return False


def home_of(facts: Facts, flow: Flow, target: cst.BaseExpression, place: Place
            ) -> Home | None:
    """Where the DDP object for the model written `target` (at `place`) can live."""
    if isinstance(place.scope, cst.ClassDef) and place.code == "self":
        # a model that trains itself (`self.forward(x)` in its own `fit()`): its DDP
        # object is a name of that method, made before the method trains
        method = facts.function(target)
        return Home("name", method, "self") if method is not None else None
    if isinstance(place.scope, cst.ClassDef):
        attr = place.code.removeprefix("self.")
        return Home("class", place.scope, attr) if "." not in attr else None
    if "." in place.code:  # `trainer.model`: an attribute of a class's instances
        prefix, _, attr = place.code.rpartition(".")
        for cls in flow.instances(Place(place.scope, prefix)):
            return Home("class", flow.family(cls), attr)
        return None
    scope = place.scope
    if isinstance(scope, cst.FunctionDef) and place.code in facts.params(scope, False) \
            and not _assigned_in(facts, flow, scope, place):
        return Home("param", scope, place.code)
    return Home("name", scope, place.code)


def _assigned_in(facts: Facts, flow: Flow, func: cst.FunctionDef, place: Place) -> bool:
    return any(
        isinstance(facts.parent.get(node), cst.AssignTarget) and flow.place_of(node) == place
        for node in facts.names if facts.function(node) is func and node.value == place.code)


def is_moved(facts: Facts, flow: Flow, model: Model) -> bool:
    """Is the model visibly moved to a device somewhere (`.to(...)`, `.cuda()`)?"""
    roots = {flow.root(p) for p in model.component}
    for call in facts.calls:
        if method_name(call) not in MOVES or not isinstance(call.func, cst.Attribute):
            continue
        place = flow.place_of(flow.strip(call.func.value))
        assign = facts.parent.get(call)
        if place is None and isinstance(assign, cst.Assign) and assign.value is call:
            place = flow.place_of(assign.targets[0].target)  # model = Net().to(device)
        if place is not None and flow.root(place) in roots:
            return True
    return False


def model_code_at(facts: Facts, flow: Flow, model: Model, near: cst.CSTNode
                  ) -> tuple[str, cst.CSTNode] | None:
    """The model as code in the function of `near` (`model`, `self.model`), and a node
    reading it there, if a name or attribute there holds it."""
    func, info = facts.function(near), facts.module_of(near)
    found = [(code, node) for node in [*facts.names, *facts.attributes]
             if facts.function(node) is func and facts.module_of(node) is info
             and (code := dotted(node)) is not None
             and flow.same(flow.place_of(node), model.place)]
    return min(found, key=lambda f: len(f[0])) if found else None
