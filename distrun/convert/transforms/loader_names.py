"""Part of the data transform: the names a DataLoader goes by (where it is bound, the
keyword it is passed as, the names a helper's callers give what it returns, the names
training reads it by through object flow), and what they make of it: a training
loader, an evaluation one, or one the analysis cannot place.
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, dotted, string_value, walk
from distrun.convert.context import Context
from distrun.convert.idioms import ITER_WRAPPERS
from distrun.convert.object_flow import Place

EVAL_NAME = re.compile(r"test|val|eval|dev|valid", re.IGNORECASE)
TRAIN_NAME = re.compile(r"train", re.IGNORECASE)


def construction_names(facts: Facts, call: cst.Call) -> set[str]:
    """Names a DataLoader gets: `x = DataLoader(...)`, `self.x = ...`, an entry of a dict
    (`loaders = {"train": DataLoader(...)}`: `loaders['train']`), a keyword it is passed as,
    and, when a helper returns it (directly, by name, or in a tuple), the
    names the helper's callers give its result."""
    node: cst.CSTNode = call
    index: int | None = None
    parent = facts.parent.get(node)
    if isinstance(parent, cst.Element) and isinstance(facts.parent.get(parent), cst.Tuple):
        tup = facts.parent[parent]
        assert isinstance(tup, cst.Tuple)
        index = list(tup.elements).index(parent)
        node, parent = tup, facts.parent.get(tup)
    names: set[str] = set()
    if isinstance(parent, cst.DictElement) and parent.value is node:  # {"train": ...}
        key, holder = string_value(parent.key), facts.parent.get(facts.parent[parent])
        if key is not None and key.isidentifier() and isinstance(holder, cst.Assign):
            names = {f"{n}['{key}']" for n in _target_names(holder, None)}
    if isinstance(parent, cst.Assign):
        names = _target_names(parent, index)
    elif isinstance(parent, cst.Arg) and parent.keyword is not None:
        names = {parent.keyword.value}
    func = facts.function(call)
    if func is None:
        return names
    if isinstance(parent, cst.Return):
        return {func.name.value} | _caller_names(facts, func, index)
    for ret in facts.returns:
        if facts.function(ret) is not func or ret.value is None:
            continue
        if isinstance(ret.value, cst.Name) and ret.value.value in names:
            names |= _caller_names(facts, func, None)
        elif isinstance(ret.value, cst.Tuple):
            for i, element in enumerate(ret.value.elements):
                if isinstance(element.value, cst.Name) and element.value.value in names:
                    names |= _caller_names(facts, func, i)
    return names


def reached_names(ctx: Context, call: cst.CSTNode, fed: dict[Place, set[str]]) -> set[str]:
    """The names training reads the loader built at `call` (`dl = DataLoader(...)`) by,
    however it got there (keywords, `**kwargs`, attributes: `object_flow`)."""
    assign = ctx.facts.parent.get(call)
    if not isinstance(assign, cst.Assign) or assign.value is not call:
        return set()
    return {name for t in assign.targets if (place := ctx.flow.place_of(t.target)) is not None
            for name in fed.get(ctx.flow.root(place), set())}


def _caller_names(facts: Facts, func: cst.FunctionDef, index: int | None, depth: int = 0
                  ) -> set[str]:
    """The names the callers of `func` give its result (its `index`-th element), and on up
    through callers that hand it on (`return data_provider(args, flag)`, or bound then
    returned: `_get_data(flag)` around a helper of every split), 4 levels up."""
    names: set[str] = set()
    for site, _ in facts.call_sites(func):
        assign = facts.parent.get(site)
        outer = facts.function(site)
        if isinstance(assign, cst.Return) and outer is not None and depth < 4:
            names |= {outer.name.value} | _caller_names(facts, outer, index, depth + 1)
        if not (isinstance(assign, cst.Assign) and assign.value is site):
            continue
        bound = _target_names(assign, index)
        names |= bound
        if outer is None or depth >= 4:
            continue
        for ret in facts.returns:
            if facts.function(ret) is not outer or ret.value is None:
                continue
            if isinstance(ret.value, cst.Name) and ret.value.value in bound:
                names |= _caller_names(facts, outer, None, depth + 1)
            elif isinstance(ret.value, cst.Tuple):
                for i, element in enumerate(ret.value.elements):
                    if isinstance(element.value, cst.Name) and element.value.value in bound:
                        names |= _caller_names(facts, outer, i, depth + 1)
    return names


def _target_names(assign: cst.Assign, index: int | None) -> set[str]:
    if index is None:
        return {n for t in assign.targets if (n := _terminal(t.target)) is not None}
    return _tuple_target_names(assign, index)


def _terminal(target: cst.BaseExpression) -> str | None:
    code = dotted(target)
    return code.rsplit(".", 1)[-1] if code else None


def _tuple_target_names(assign: cst.Assign, index: int) -> set[str]:
    names = set()
    for t in assign.targets:
        if isinstance(t.target, (cst.Tuple, cst.List)) and index < len(t.target.elements):
            name = _terminal(t.target.elements[index].value)
            if name:
                names.add(name)
    return names


def builds_both(facts: Facts, call: cst.Call, names: set[str], train_names: set[str]
                 ) -> bool:
    """A helper returning the loaders of several splits (`get_loader("train")` and
    `get_loader("test")`): its callers name them for training and for evaluation."""
    evaluates = {n for n in names if EVAL_NAME.search(n)}
    trains = (names - evaluates) & train_names or {n for n in names if TRAIN_NAME.search(n)}
    return facts.function(call) is not None and bool(evaluates) and bool(trains)


def classify(names: set[str], train_names: set[str], count: int) -> tuple[str, str]:
    if names & train_names:
        return "train", "it feeds the training loop"
    if any(EVAL_NAME.search(n) for n in names):
        return "eval", ""
    if any(TRAIN_NAME.search(n) for n in names):
        return "train", "its name says training"
    if count == 1:
        return "train", "it is the script's only DataLoader"
    return "unknown", ""


def stays_in_its_function(facts: Facts, call: cst.Call, names: set[str],
                          training: list[cst.CSTNode]) -> bool:
    """Is the loader `call` makes bound to a local name of a function that never trains
    and read only there (iterated, measured), never handed on (an argument, a return, an
    attribute)? Then a training loop elsewhere that reads a parameter of the same name
    (`def train_loop(model, dataloader)`) is not what reads it (voice100's `predict()`)."""
    func = facts.function(call)
    parent = facts.parent.get(call)
    if func is None or not isinstance(parent, cst.Assign) or any(
            facts.inside(node, func) for node in training):
        return False  # (training: the training loops and the draws of step loops)
    local = {dotted(t.target) for t in parent.targets} & names
    if not local or any("." in name for name in local if name):
        return False
    for node in walk(func):
        if not isinstance(node, cst.Name) or node.value not in local:
            continue
        up = facts.parent.get(node)
        while isinstance(up, (cst.Element, cst.Tuple, cst.List, cst.Set, cst.StarredElement,
                              cst.DictElement, cst.Dict)):  # `return train, test`
            up = facts.parent.get(up)
        if isinstance(up, cst.Arg):
            call_of = facts.parent.get(up)
            if not (isinstance(call_of, cst.Call) and (
                    facts.call_name(call_of) in ITER_WRAPPERS or dotted(call_of.func) == "len")):
                return False
        elif isinstance(up, (cst.Return, cst.Yield, cst.Lambda)) or isinstance(
                up, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and up.value is not None \
                and facts.inside(node, up.value):
            return False
    return True
