"""State kept per sample of the data set, written at the batch's indices during training
(part of the hazards transform).

Learning with noisy labels keeps, for each sample, a moving average of its predictions
(shengliu66/ELR's `self.target[index] = beta * self.target[index] + ...` in its loss
object, the Dataset returning each sample's index); the forgetting-events statistics keep
each sample's losses and margins in a dict by its index (mtoneva/example_forgetting), then
save it. Under DDP each rank meets only its own share of the samples: the state each rank
holds covers 1/WORLD_SIZE of them (rank 0 saves its share's), and a sample another rank
trained in an earlier epoch has no entry, or a stale one, when this rank meets it. Not
rewritten (what to merge, and how, is the script's: a union of dicts, a sum, the newest
value): a warning at the first write, with the fix.

Taken: `X[key] = ...` or `X[key] += ...` in a training loop or in what it calls (or in the
`forward` of a class of the project: a loss object built by name from a config), where
`X` outlives the step (an attribute, a parameter, a global: not a local of the function)
and `key` reads a name that says it is a sample's index (`index`, `indices`, `inds`), or
the variable of a loop over one (`for i, sample in enumerate(index.tolist())`).
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.context import Context
from distrun.convert.idioms import trains
from distrun.convert.object_flow import Flow
from distrun.convert.syntax import walk

# a sample's index in the data set (`idx` alone is as often a position in the batch)
_INDEX = re.compile(r"(^|_)(indexs|indexes|indices|ind|inds)(_|$)|index", re.IGNORECASE)


def per_sample_state(ctx: Context) -> None:
    facts, flow = ctx.facts, ctx.flow
    said: set[str] = set()
    for assign in facts.assigns:
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            target = assign.targets[0].target
        elif isinstance(assign, cst.AugAssign):
            target = assign.target
        else:
            continue
        if not isinstance(target, cst.Subscript) or not target.slice:
            continue
        holder = dotted(target.value)
        keys = {n.value for n in walk(target.slice[0]) if isinstance(n, cst.Name)}
        if holder is None or holder in said or not (
                any(_INDEX.search(k) for k in keys) or _over_indices(facts, assign, keys)):
            continue
        func = facts.function(assign)
        if not holder.startswith("self.") and func is not None and _local(facts, func, holder):
            continue
        if not _in_training(ctx, assign, flow):
            continue
        said.add(holder)
        ctx.plan.finding(assign, "hazards.per_sample_state",
                         f"`{holder}` keeps a value per sample of the data set, written at "
                         "the batch's indices during training: under DDP each rank meets only "
                         "its own share of the samples, so the state each rank holds (and rank "
                         "0 saves) covers 1/WORLD_SIZE of them, and a sample another rank "
                         "trained before has no entry, or a stale one, here",
                         "gather the (index, value) pairs from every rank before writing them "
                         "(`dist.all_gather_object`, or `all_gather` of tensors), so every rank "
                         "keeps the whole data set's state")


def _over_indices(facts: Facts, node: cst.CSTNode, keys: set[str]) -> bool:
    """Is a key the variable of a loop around `node` over indices (`for i, sample in
    enumerate(index.tolist())`)?"""
    return any(isinstance(loop, cst.For) and keys & {
        n.value for n in walk(loop.target) if isinstance(n, cst.Name)} and any(
        isinstance(n, cst.Name) and _INDEX.search(n.value) for n in walk(loop.iter))
        for loop in facts.enclosing_loops(node))


def _local(facts: Facts, func: cst.FunctionDef, name: str) -> bool:
    """Is `name` bound in `func` (not a parameter): a value of this call only?"""
    if "." in name or name in {p.name.value for p in func.params.params}:
        return False
    return any(isinstance(a, cst.Assign) and facts.function(a) is func and any(
        dotted(t.target) == name for t in a.targets) for a in facts.assigns)


def _in_training(ctx: Context, node: cst.CSTNode, flow: Flow) -> bool:
    """In a loop that trains, or in a function called (two calls deep) from one."""
    facts = ctx.facts
    if any(trains(facts, loop.body, flow=flow) for loop in facts.enclosing_loops(node)):
        return True
    funcs = [facts.function(node)]
    if funcs[0] is not None and funcs[0].name.value in ("forward", "__call__") and \
            facts.enclosing_class(funcs[0]) is not None:
        return True  # a module's or a loss object's step (built by name from a config)
    for _ in range(2):
        sites = [site for func in funcs if func is not None for site in _sites(ctx, func)]
        if any(trains(facts, loop.body, flow=flow) for site in sites
               for loop in facts.enclosing_loops(site)):
            return True
        funcs = [facts.function(site) for site in sites]
    return False


def _sites(ctx: Context, func: cst.FunctionDef) -> list[cst.Call]:
    return [site for site, _ in ctx.calls_of(func)]
