"""Loaders drawn from by hand: `it = iter(loader)` kept (often in `self.`), batches taken
with `next(it)`, the iterator made anew on StopIteration:

    def next_batch(self):
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            return next(self.it)

A loader drawn from this way is a training loader when a draw feeds training: the
function that calls `next(it)` trains itself, or its result goes into a backward pass
where it is called (`x, y = feeder.next_batch()` ... `loss.backward()`), also through a
function that returns it. The data transform shards such a loader like one a training
loop iterates; `epochs.set_epoch_on_new_iterators` moves its sampler's epoch on before
each new `iter()`.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, positional
from distrun.convert.idioms import TrainLoop, iter_sources, passed_through
from distrun.convert.models import feeds_backward
from distrun.convert.object_flow import Flow

_DEPTH = 3


def drawn_for_training(facts: Facts, flow: Flow) -> list[cst.BaseExpression]:
    """The loader (`self.loader` in `iter(self.loader)`) of each `iter()` that is kept
    and drawn from with `next()` where the draw feeds training."""
    iterators = _kept_iterators(facts)
    found: list[cst.BaseExpression] = []
    for call in facts.calls:
        if facts.call_name(call) != "next" or not positional(call):
            continue
        code = dotted(positional(call)[0].value)
        key = _key(facts, code, call) if code is not None else None
        loaders = iterators.get(key) if key is not None else None
        if not loaders or not _feeds_training(facts, flow, call, 0):
            continue
        found += [loader for loader in loaders if loader not in found]
    return found


def passes_followed(facts: Facts, loader: cst.BaseExpression) -> bool:
    """Is `loader` drawn from through `it = iter(loader)` itself, so that each new pass
    starts where `iter()` is called (not in a zip, a cycle or a generator of the
    project, which start passes of their own)?"""
    arg = facts.parent.get(loader)
    call = facts.parent.get(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call):
        return False
    found = facts.callee(call)  # `while True: for b in loader: yield b`: a pass each `for`
    return facts.call_name(call) == "iter" or found is not None and any(
        isinstance(next(iter(facts.enclosing_loops(loop)), None), cst.While)
        for loop in facts.for_loops if facts.function(loop) is found[0])


def _kept_iterators(facts: Facts) -> dict[tuple[int, str], list[cst.BaseExpression]]:
    """`it = iter(loader)` / `self.it = iter(self.loader)`: the iterator's key -> the
    loaders it is made from."""
    found: dict[tuple[int, str], list[cst.BaseExpression]] = {}
    for assign in facts.assigns:
        value = assign.value
        if not (isinstance(value, cst.Call) and len(value.args) >= 1 and (
                facts.call_name(value) in ("iter", "zip", "itertools.cycle")
                or passed_through(facts, value) is not None)):
            continue
        loaders = [e for e in iter_sources(facts, value) if dotted(e) is not None]
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) \
            else [assign.target]
        for target in targets:
            code = dotted(target)
            key = _key(facts, code, target) if code is not None else None
            if key is not None:
                found.setdefault(key, []).extend(loaders)
    return found


def drawn_loops(facts: Facts, flow: Flow) -> list[TrainLoop]:
    """The step loops that draw a training batch with `next()` (`for _ in
    range(iterations): x, y = next(batches)`, also through a function returning the
    draw): the innermost `for` around the draw, or around the call that feeds the
    backward pass, once for each loader drawn from."""
    iterators = _kept_iterators(facts)
    found: list[TrainLoop] = []
    for call in facts.calls:
        if facts.call_name(call) != "next" or not positional(call):
            continue
        code = dotted(positional(call)[0].value)
        key = _key(facts, code, call) if code is not None else None
        loaders = iterators.get(key) if key is not None else None
        for site in _training_sites(facts, flow, call, 0) if loaders else ():
            loop = next(iter(facts.enclosing_loops(site)), None)
            if isinstance(loop, cst.For):
                found += [TrainLoop(loop, c) for c in dict.fromkeys(
                    dotted(loader) or "" for loader in loaders or ()) if c and
                          TrainLoop(loop, c) not in found]
    return found


def _training_sites(facts: Facts, flow: Flow, draw: cst.Call, depth: int) -> list[cst.Call]:
    """Where the batch drawn at `draw` goes into a backward pass: `draw` itself, or the
    calls of a function returning it whose result does; a draw that trains outside any
    loop of its function (a `step()` method): the calls of that function."""
    func = facts.function(draw)
    if feeds_backward(facts, draw):
        if func is None or depth >= _DEPTH or next(iter(facts.enclosing_loops(draw)), None):
            return [draw]
        return [call for call, _ in flow.call_sites(func)]
    if func is None or depth >= _DEPTH or not _returned(facts, draw, func):
        return []
    return [site for call, _ in flow.call_sites(func)
            for site in _training_sites(facts, flow, call, depth + 1)]


def _key(facts: Facts, code: str, near: cst.CSTNode) -> tuple[int, str] | None:
    """An iterator is one per class for `self.it`, one per function or module else."""
    if code.startswith("self."):
        cls = facts.enclosing_class(near)
        return (id(cls), code) if cls is not None else None
    return id(facts.scope(near)), code


def _feeds_training(facts: Facts, flow: Flow, draw: cst.Call, depth: int) -> bool:
    """Does the batch drawn at `draw` (a `next()` call, or a call of a function that
    returns one) go into a backward pass, here or where a function returning it is
    called?"""
    if feeds_backward(facts, draw):
        return True
    func = facts.function(draw)
    if func is None or depth >= _DEPTH or not _returned(facts, draw, func):
        return False
    return any(_feeds_training(facts, flow, site, depth + 1)
               for site, _ in flow.call_sites(func))


def _returned(facts: Facts, draw: cst.Call, func: cst.FunctionDef) -> bool:
    """Is what `draw` gives returned by `func` (`return next(it)`, or `batch = next(it)`
    ... `return batch`)?"""
    stmt = facts.statement(draw)
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    if any(isinstance(s, cst.Return) for s in stmt.body):
        return True
    assigned: set[str] = set()
    for small in stmt.body:
        for target in small.targets if isinstance(small, cst.Assign) else ():
            elements = [e.value for e in target.target.elements] if isinstance(
                target.target, (cst.Tuple, cst.List)) else [target.target]
            assigned |= {n for e in elements if (n := dotted(e)) is not None}
    returned = [ret.value for ret in facts.returns
                if ret.value is not None and facts.function(ret) is func]
    return any(dotted(v) in assigned or (isinstance(v, cst.Tuple) and any(
        dotted(e.value) in assigned for e in v.elements)) for v in returned)
