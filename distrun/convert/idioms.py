"""Shared idioms: what counts as a DataLoader, an optimizer and its step, a backward, a
device move, an assignment, a training loop. Every transform asks these questions the
same way, here, rather than each keeping its own answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from distrun.convert.analysis import Facts, dotted, positional, walk
from distrun.convert.keywords import (
    keyword_read,
    keywords_passed,
    spread_onto_self,
    star_kwargs,
)


class Flow(Protocol):
    """What `trains` asks of object_flow.Flow (which imports this module)."""

    def callee(self, call: cst.Call) -> tuple[cst.FunctionDef, bool] | None: ...

    def forward_of(self, call: cst.Call) -> cst.FunctionDef | None: ...


DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
ITERABLE_DATASET = frozenset({"torch.utils.data.IterableDataset",
                              "torch.utils.data.dataset.IterableDataset"})
DATA_PARALLEL = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel",
    "apex.parallel.DistributedDataParallel",  # apex's DDP: replaced like DataParallel
})
# Calls that hand a loader on to a loop unchanged: `for i, (x, y) in enumerate(loader)`.
ITER_WRAPPERS = frozenset({
    "enumerate", "iter", "zip", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm",
    "itertools.cycle",
})
MOVES = ("to", "cuda")  # methods that move a model (or tensor) to a device
_OPTIMIZER_NAMES = frozenset({
    "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "NAdam",
    "RAdam", "SparseAdam", "LBFGS", "Lion", "Adafactor", "LAMB", "Lamb",
})
# `.step()` on something named like an optimizer (or a GradScaler, which steps one).
_STEP_OWNER = re.compile(r"opt|scaler", re.IGNORECASE)


def is_optimizer(facts: Facts, call: cst.Call) -> bool:
    """`torch.optim.SGD(...)`, `optim.AdamW(...)`, `Lion(...)`: an optimizer is built."""
    name = facts.call_name(call) or ""
    if name.startswith("torch.optim.lr_scheduler") or name.startswith("torch.optim.swa_utils"):
        return False
    last = name.rsplit(".", 1)[-1]
    return name.startswith("torch.optim.") and last[:1].isupper() or last in _OPTIMIZER_NAMES


def method_name(call: cst.Call) -> str | None:
    """`x.step()` -> "step"; None for a call of a plain name."""
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def receiver(call: cst.Call) -> str | None:
    """`self.optimizer.step()` -> "self.optimizer" (None unless a dotted name)."""
    return dotted(call.func.value) if isinstance(call.func, cst.Attribute) else None


def is_backward(call: cst.Call) -> bool:
    """`loss.backward()` (whatever the receiver)."""
    return method_name(call) == "backward"


def is_optimizer_step(call: cst.Call) -> bool:
    """`optimizer.step()`, `self.opt_g.step()`, `scaler.step(optimizer)`; never a
    scheduler's step."""
    owner = receiver(call) or ""
    return (method_name(call) == "step" and bool(_STEP_OWNER.search(owner))
            and "sched" not in owner.lower())


def trains(facts: Facts, container: cst.CSTNode, depth: int = 0, flow: Flow | None = None
           ) -> bool:
    """Does `container` (or a function of the script it calls, 3 calls deep) run a
    backward pass or step an optimizer? With `flow`, methods called on instances of the
    script's classes are followed too (`algorithm.update(x, y)`)."""
    for call in facts.calls_in(container):
        if is_backward(call) or is_optimizer_step(call):
            return True
        found = flow.callee(call) if flow is not None else facts.callee(call)
        if found is None and flow is not None:  # a module of the project whose forward
            forward = flow.forward_of(call)     # trains (a meta-learner's whole step)
            found = (forward, True) if forward is not None else None
        if found is not None and depth < 3 and found[0] is not container:
            if trains(facts, found[0], depth + 1, flow):
                return True
    return False


def steps_inside(facts: Facts, flow: Flow | None, call: cst.Call) -> bool:
    """Is `call` a call of a callable object of the project whose `__call__` runs the
    backward pass or steps an optimizer itself (the Annotated Transformer's
    `loss_compute(out, batch.trg_y, batch.ntokens)`: backward, `opt.step()`)? The loop
    that makes it trains, though its own body shows neither."""
    method = flow.forward_of(call) if flow is not None else None
    return method is not None and method.name.value == "__call__" and any(
        is_backward(c) or is_optimizer_step(c) for c in facts.calls_in(method))


def unwrap_iter(facts: Facts, expr: cst.BaseExpression) -> cst.BaseExpression:
    """`enumerate(tqdm(loader))` -> `loader`; also through a name the function binds once
    to such a wrapper (`pbar = tqdm(loader)` then `enumerate(pbar)` -> `loader`)."""
    for _ in range(8):
        if isinstance(expr, cst.Name):
            wrapped = _bound_wrapper(facts, expr)
            if wrapped is None:
                break
            expr = wrapped
        through = passed_through(facts, expr)
        if through is not None:
            expr = through
            continue
        if not (isinstance(expr, cst.Call) and facts.call_name(expr) in ITER_WRAPPERS):
            break
        args = positional(expr)
        if not args:
            break
        expr = args[0].value
    return expr


def passed_through(facts: Facts, expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The argument a generator of the project yields the items of, over and over or
    once (`def loop_iterable(it): while True: yield from it`, or `for x in it: yield x`):
    `loop_iterable(loader)` -> `loader`."""
    if not isinstance(expr, cst.Call):
        return None
    found = facts.callee(expr)
    if found is None or found[1]:
        return None
    func = found[0]
    for node in walk(func.body):
        item: cst.BaseExpression | None = None
        if isinstance(node, cst.Yield) and isinstance(node.value, cst.From):
            item = node.value.item
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name) and any(
                isinstance(y, cst.Yield) and isinstance(y.value, cst.Name)
                and y.value.value == node.target.value for y in walk(node.body)):
            item = node.iter
        if isinstance(item, cst.Name):
            return facts.argument_for(expr, func, False, item.value)
    return None


def _bound_wrapper(facts: Facts, name: cst.Name) -> cst.Call | None:
    """The wrapper call `name` is bound to by the one assignment to it in its function,
    or by a `with` around it (`with tqdm(self.data_loader) as progress:`, ELR's trainer)."""
    scope = facts.function(name)
    values = [a.value for a in facts.assigns if isinstance(a, cst.Assign)
              and facts.function(a) is scope and facts.module_of(a) is facts.module_of(name)
              and any(isinstance(t.target, cst.Name) and t.target.value == name.value
                      for t in a.targets)]
    if not values:
        values = [item.item for up in facts.ancestors(name) if isinstance(up, cst.With)
                  for item in up.items if item.asname is not None and isinstance(
                      item.asname.name, cst.Name) and item.asname.name.value == name.value]
    if len(values) != 1 or not isinstance(values[0], cst.Call) or (
            facts.call_name(values[0]) not in ITER_WRAPPERS
            and passed_through(facts, values[0]) is None):
        return None
    return values[0]


@dataclass(frozen=True)
class TrainLoop:
    loop: cst.For
    loader: str  # dotted code of the iterated loader, e.g. "train_loader" or "self.loader"


def train_loops(facts: Facts, flow: Flow | None = None) -> list[TrainLoop]:
    """`for` loops over a loader whose body trains (see `trains` for `flow`); a loop over
    several loaders at once (`zip(cycle(labelled), unlabelled)`) once for each."""
    loops = []
    for loop in facts.for_loops:
        codes = [c for e in iter_sources(facts, loop.iter) if (c := dotted(e)) is not None]
        if codes and trains(facts, loop.body, flow=flow):
            loops += [TrainLoop(loop, code) for code in dict.fromkeys(codes)]
    return loops


def iter_sources(facts: Facts, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """What a loop iterates, as `unwrap_iter` finds it, each argument of a `zip` on the
    way: `enumerate(zip(cycle(a), b))` -> [a, b]."""
    for _ in range(8):
        if isinstance(expr, cst.Name):
            wrapped = _bound_wrapper(facts, expr)
            if wrapped is None:
                break
            expr = wrapped
        through = passed_through(facts, expr)
        if through is not None:
            expr = through
            continue
        if not (isinstance(expr, cst.Call) and facts.call_name(expr) in ITER_WRAPPERS):
            break
        args = positional(expr)
        if facts.call_name(expr) == "zip" and len(args) > 1:
            return [found for arg in args for found in iter_sources(facts, arg.value)]
        if not args:
            break
        expr = args[0].value
    return [expr]


def assigns_inside(facts: Facts, container: cst.CSTNode, code: str) -> bool:
    """Is `code` (a name or `self.x`) an assignment target anywhere inside `container`?"""
    return any(
        isinstance(facts.parent.get(node), cst.AssignTarget) and dotted(node) == code
        and facts.inside(node, container)
        for node in _names_and_attributes(facts)
    )


def _names_and_attributes(facts: Facts) -> Iterator[cst.Name | cst.Attribute]:
    yield from facts.names
    yield from facts.attributes


def statement_assigns(stmt: cst.CSTNode, code: str) -> bool:
    """Does the simple statement line `stmt` assign `code` (`=`, `+=` or annotated)?"""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) \
                else [small.target]
            if any(dotted(t) == code for t in targets):
                return True
    return False


def moves(facts: Facts, stmt: cst.CSTNode, code: str) -> bool:
    """Does `stmt` call `code.to(...)` or `code.cuda()` anywhere inside it?"""
    return any(method_name(c) in MOVES and receiver(c) == code for c in facts.calls_in(stmt))


def assigned_moved(stmt: cst.CSTNode, code: str) -> bool:
    """`model = Net().to(device)` (or `.cuda()`)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    return any(
        isinstance(small, cst.Assign)
        and any(dotted(t.target) == code for t in small.targets)
        and isinstance(small.value, cst.Call) and method_name(small.value) in MOVES
        for small in stmt.body
    )


def strip_moves(expr: cst.BaseExpression) -> str | None:
    """`model`, `model.to(device)`, `model.cuda()` -> "model"."""
    while isinstance(expr, cst.Call) and method_name(expr) in MOVES:
        assert isinstance(expr.func, cst.Attribute)
        expr = expr.func.value
    return dotted(expr)


def _tuple_source(facts: Facts, attr: cst.Attribute) -> cst.BaseExpression | None:
    """`self.a, self.b = a, b`: the value `attr` (an element of the target) is given."""
    element = facts.parent.get(attr)
    target = facts.parent.get(element) if element is not None else None
    holder = facts.parent.get(target) if target is not None else None
    assign = facts.parent.get(holder) if isinstance(holder, cst.AssignTarget) else None
    if not (isinstance(target, cst.Tuple) and isinstance(assign, cst.Assign) and isinstance(
            assign.value, cst.Tuple) and len(assign.value.elements) == len(target.elements)):
        return None
    index = [e.value for e in target.elements].index(attr)
    return assign.value.elements[index].value


def origin_names(facts: Facts, code: str, scope: cst.CSTNode, depth: int = 0) -> set[str]:
    """Names the loader `code` (seen in `scope`) goes by on its way from where it is built."""
    names = {code.rsplit(".", 1)[-1]}
    if depth > 4:
        return names
    if code.startswith("self."):
        cls = facts.enclosing_class(scope)
        if cls is None:
            return names
        for attr in facts.attributes:
            parent = facts.parent.get(attr)
            source = _tuple_source(facts, attr) if isinstance(parent, cst.Element) else None
            if dotted(attr) != code or not (isinstance(parent, cst.AssignTarget) or source):
                continue
            if facts.enclosing_class(attr) is not cls:
                continue
            assign = facts.parent.get(parent) if parent is not None else None
            value = (dotted(assign.value) or keyword_read(facts, assign.value)) \
                if isinstance(assign, cst.Assign) else dotted(source) if source else None
            method = facts.function(attr)
            if value is not None and method is not None:
                names |= origin_names(facts, value, method, depth + 1)
        for stmt in cls.body.body:  # `self.__dict__.update(kwargs)`: a keyword of the call
            if isinstance(stmt, cst.FunctionDef) and spread_onto_self(facts, stmt) is not None:
                names |= origin_names(facts, code.removeprefix("self."), stmt, depth + 1)
    elif isinstance(scope, cst.FunctionDef) and (code in facts.params(scope, False) or (
            star_kwargs(scope) is not None and "." not in code)):  # a keyword **kwargs takes
        for site, is_method in facts.call_sites(scope):
            arg = facts.argument_for(site, scope, is_method, code) or next(
                (v for k, v in keywords_passed(facts, site) if k == code), None)
            arg_code = dotted(arg) if arg is not None else None
            if arg_code is not None:
                names |= origin_names(facts, arg_code, facts.scope(site), depth + 1)
    return names


def in_eval_mode(facts: Facts, call: cst.Call) -> bool:
    """Is the model `call` runs last put in evaluation mode before it, in its function or
    loop (`classifier = classifier.eval()` then a test batch scored inside the training
    loop: pointnet.pytorch), with no `.train()` since?"""
    func = call.func.value if isinstance(call.func, cst.Attribute) and \
        call.func.attr.value == "forward" else call.func
    model = dotted(func)
    scope = facts.function(call) or facts.top_level_statement(call)
    line = facts.line(call)
    modes = [(facts.line(c), method_name(c)) for c in facts.calls_in(scope)
             if method_name(c) in ("eval", "train") and receiver(c) == model
             and facts.line(c) < line and all(  # not in a branch the call is outside of
                 facts.inside(call, up) for up in facts.ancestors(c)
                 if isinstance(up, cst.If) and facts.inside(up, scope))]
    return bool(modes) and max(modes)[1] == "eval"
