"""Loaders kept in a dict by phase (part of the data transform): the transfer-learning
tutorial's pattern, copied into countless scripts.

    dataloaders = {x: DataLoader(image_datasets[x], batch_size=4, shuffle=True)
                   for x in ['train', 'val']}
    ...
    for phase in ['train', 'val']:
        for inputs, labels in dataloaders[phase]:
            ...
            if phase == 'train':
                loss.backward()
                optimizer.step()

One DataLoader call makes the loader of every phase. Only the phase that trains (the
`if phase == '...'` around the backward pass or the step) is sharded, rebuilt right
after the dict is made:

    dataloaders['train'] = shard_loader(dataloaders['train'])   (accelerate: prepare)

The others stay whole: every rank evaluates all of the validation set, so its metrics,
and what the script does with them (keeping the best epoch's weights), are the same on
every rank. A loop that trains on a phase the analysis cannot name is an error.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import statement
from distrun.convert.context import Context
from distrun.convert.idioms import is_backward, is_optimizer_step, trains, unwrap_iter
from distrun.convert.transforms.rebuild import shard_loader_call


def shard_phase_loaders(ctx: Context, loaders: list[cst.Call]) -> set[int]:
    """Handles the DataLoader calls that make a dict of loaders by phase, iterated by a
    training loop as `D[phase]`; returns the ids of the calls handled (trained or not)."""
    handled: set[int] = set()
    for call in loaders:
        made = _dict_of(ctx, call)
        if made is None:
            continue
        assign, node, keys = made
        target = dotted(node)
        assert target is not None
        phases = _training_phases(ctx, node)
        if phases is None:
            continue  # not read by phase in a training loop: the usual rules
        handled.add(id(call))
        trained = sorted(phases & keys) if phases else sorted(k for k in keys if "train" in k)
        if len(trained) != 1:
            ctx.plan.finding(call, "data.unknown_loader",
                             "this DataLoader makes the loaders of every phase "
                             f"({', '.join(sorted(keys))}) and cannot tell which one trains: "
                             "left unsharded (every rank reads all of it)",
                             f"after the dict is made: `{target}[KEY] = ...` with a "
                             "DistributedSampler for the training phase's loader")
            continue
        key = trained[0]
        _rebuild_after(ctx, assign, f"{target}[{key!r}]")
    return handled


def _dict_of(ctx: Context, call: cst.Call
             ) -> tuple[cst.SimpleStatementLine, cst.BaseExpression, set[str]] | None:
    """`D = {x: DataLoader(...) for x in ['train', 'val']}`: the statement, `D`, the keys."""
    facts = ctx.facts
    comp = facts.parent.get(call)
    if not isinstance(comp, cst.DictComp) or comp.value is not call:
        return None
    keys = _literal_strings(comp.for_in.iter)
    assign = facts.parent.get(comp)
    line = facts.parent.get(assign) if assign is not None else None
    if not keys or not isinstance(assign, cst.Assign) or len(assign.targets) != 1 \
            or not isinstance(line, cst.SimpleStatementLine):
        return None
    target = assign.targets[0].target
    return (line, target, keys) if dotted(target) is not None else None


def _literal_strings(node: cst.BaseExpression) -> set[str]:
    if not isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return set()
    found = {e.value.evaluated_value for e in node.elements
             if isinstance(e.value, cst.SimpleString) and isinstance(e.value.evaluated_value, str)}
    return found if len(found) == len(node.elements) else set()


def _training_phases(ctx: Context, target: cst.BaseExpression) -> set[str] | None:
    """The phases a training loop over `target[phase]` trains on (`if phase == 'train':`
    around its backward pass or step; empty: no such test), None when no training loop
    reads the dict by phase."""
    facts, flow = ctx.facts, ctx.flow
    made = flow.place_of(target)
    found: set[str] | None = None
    for loop in facts.for_loops:
        read = unwrap_iter(facts, loop.iter)
        if not isinstance(read, cst.Subscript) or len(read.slice) != 1:
            continue
        index = read.slice[0].slice
        phase = dotted(index.value) if isinstance(index, cst.Index) else None
        place = flow.place_of(read.value)
        if phase is None or place is None or not trains(facts, loop.body, flow=flow):
            continue
        if not flow.same(place, made):
            continue
        found = found if found is not None else set()
        for call in facts.calls_in(loop.body):
            if is_backward(call) or is_optimizer_step(call):
                found |= _tested_phases(ctx, call, phase)
    return found


def _tested_phases(ctx: Context, call: cst.Call, phase: str) -> set[str]:
    """The strings `phase` is compared equal to in the `if`s around `call`."""
    found: set[str] = set()
    for up in ctx.facts.ancestors(call):
        if isinstance(up, cst.If) and isinstance(up.test, cst.Comparison) \
                and len(up.test.comparisons) == 1 \
                and isinstance(up.test.comparisons[0].operator, cst.Equal):
            left, right = up.test.left, up.test.comparisons[0].comparator
            for name, value in ((left, right), (right, left)):
                if dotted(name) == phase and isinstance(value, cst.SimpleString) \
                        and isinstance(value.evaluated_value, str):
                    found.add(value.evaluated_value)
    return found


def _rebuild_after(ctx: Context, line: cst.SimpleStatementLine, loader: str) -> None:
    call = shard_loader_call(ctx, loader, line)
    ctx.plan.insert_after(line, [statement(f"{loader} = {call}\n")])
    ctx.plan.change(line, "data.phase_loaders",
                    f"one DataLoader call makes the loader of every phase: `{loader}`, the "
                    f"one that trains, is rebuilt with `{call}` (each rank reads its own "
                    "part, a new shuffle at each pass); the others stay whole, so every rank "
                    "evaluates all of them and takes the same decisions")
    ctx.plan.shards_batches(line)  # the closing "batch:" note: batch_size is now per rank
