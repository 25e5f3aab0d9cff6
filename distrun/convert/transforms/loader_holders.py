"""DataLoaders made inside a loader class of the project (part of the data transform).

DomainBed's `InfiniteDataLoader` makes its DataLoader in `__init__`, keeps an iterator of
it, and is iterated itself (`__iter__` yields `next()` of that iterator); the training
script makes a list of them and steps `next(zip(*train_loaders))`. The DataLoader call
bears no name of its own (`self._infinite_iterator = iter(DataLoader(...))`), and its
batches reach the backward pass through the holder, `zip`, a comprehension and a method
of another module: nothing the analysis follows. What tells training from evaluation is
the name the holder's objects are bound to where the class is called:

    train_loaders = [InfiniteDataLoader(dataset=env, ...) for i, (env, w) in ...]
    eval_loaders = [FastDataLoader(dataset=env, ...) for env, _ in ...]

`holder_names` gives those names, for a DataLoader made in `__init__` of a class that
defines `__iter__` or `__next__` (an object that is itself a loader). The data transform
uses them only for a loader it could not classify otherwise. Its epochs are not followed
through the holder: a DistributedSampler given there moves to the next epoch after each
pass (`AutoEpochSampler`).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import Facts, dotted

# What may stand between the holder's call and the name it is bound to.
_CONTAINERS = (cst.ListComp, cst.GeneratorExp, cst.Element, cst.List, cst.Tuple)


@dataclass(frozen=True)
class Holder:
    cls: str  # the class holding the DataLoader
    names: frozenset[str]  # the names its objects are bound to where it is called


def holder_names(facts: Facts, call: cst.Call) -> Holder | None:
    """The loader class making the DataLoader `call` in its `__init__`, and the names its
    objects get (`x = C(...)`, `xs = [C(...) for ...]`, `xs = [C(...), C(...)]`)."""
    init = facts.function(call)
    cls = facts.enclosing_class(call)
    if init is None or cls is None or init.name.value != "__init__" or not (
            facts.method(cls, "__iter__") or facts.method(cls, "__next__")):
        return None
    names: set[str] = set()
    for site, _ in facts.call_sites(init):
        node: cst.CSTNode = site
        parent = facts.parent.get(node)
        while isinstance(parent, _CONTAINERS) and _holds(parent, node):
            node, parent = parent, facts.parent.get(parent)
        if isinstance(parent, cst.Assign) and parent.value is node:
            names |= {code.rsplit(".", 1)[-1] for t in parent.targets
                      if (code := dotted(t.target)) is not None}
    return Holder(cls.name.value, frozenset(names)) if names else None


def _holds(container: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Is `node` what `container` is made of (the element of a comprehension, an item of
    a list), not a part of its loop (`for env in C(...)`)?"""
    if isinstance(container, (cst.ListComp, cst.GeneratorExp)):
        return container.elt is node
    if isinstance(container, cst.Element):
        return container.value is node
    return True  # a List or Tuple holding the Element
