"""A function of the project that makes the training DataLoader and returns it, also
called where nothing trains (part of the data transform).

One helper serves every pass over a data set (kuc2477/pytorch-ewc's `get_data_loader`:
the training loop of each task, the Fisher information estimated over the task's data
after it, and the evaluation of every task seen so far). The sampler goes into the
helper because one caller trains, so every caller's loader is sharded: the Fisher
estimate, kept as buffers the penalty of the next tasks reads, would be each rank's
own share's (rank 0 saves its own), and the evaluation would measure 1/WORLD_SIZE of the
test set and print it as the whole, silently. A call of the helper in a function that
never trains, whose loader stays there (iterated, measured, never handed on), gets the
same loader read whole again:

    data_loader = utils.get_data_loader(dataset, batch_size)
 -> data_loader = whole_loader(utils.get_data_loader(dataset, batch_size))

`whole_loader` makes a DataLoader over the same dataset with the same batch size, shuffle
(torch's generator, as the original's RandomSampler), collation and workers, without the
sampler: every rank measures the whole set, as the single process does.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, keyword
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import trains
from distrun.convert.names import Names
from distrun.convert.transforms.batch_samplers import sampler_made
from distrun.convert.transforms.loader_names import construction_names, stays_in_its_function
from distrun.convert.transforms.rebuild import SHAREABLE


def whole_where_measured(ctx: Context) -> None:
    """`whole_loader(helper(...))` at each call of a training loader's helper in a
    function that never trains and keeps the loader to itself."""
    facts, flow = ctx.facts, ctx.flow
    done: set[int] = set()
    for made in ctx.train_loaders:
        helper = facts.function(made)
        if helper is None or not _returned(ctx, made, helper):
            continue
        for site, _ in flow.call_sites(helper):
            func = facts.function(site)
            assign = facts.parent.get(site)
            if func is None or func is helper or id(site) in done or trains(
                    facts, func, flow=flow) or not isinstance(assign, cst.Assign):
                continue
            names = {dotted(t.target) or "" for t in assign.targets}
            if not stays_in_its_function(facts, site, names, []):
                continue
            done.add(id(site))
            name = _read_whole(ctx, site, site)
            ctx.plan.change(site, "data.whole_for_measures", f"`{facts.code(site.func)}()` "
                            f"makes the training loader (line {facts.line(made)}, sharded), "
                            f"but `{func.name.value}()` does not train: it reads the loader "
                            f"whole again (`{name}(...)`), so every rank measures "
                            "the whole set, as the single process does")


def whole_given(ctx: Context, call: cst.Call, arg: cst.BaseExpression, func: str,
                code: str) -> bool:
    """`validate(whole_loader(valid_loader), ...)`: the sharded training loader `arg`
    handed to `func`, which does not train, read whole (False: not a DataLoader the
    script makes itself, left to the finding)."""
    facts = ctx.facts
    made = [c for c in ctx.train_loaders if code in construction_names(facts, c)]
    if not made or any(facts.call_name(c) != "torch.utils.data.DataLoader" or keyword(
            c, "batch_sampler") is not None or not _shared_whole(ctx, c) for c in made):
        return False  # (a sampler of its own drawn per rank: left to the finding)
    name = _read_whole(ctx, call, arg)
    ctx.plan.change(call, "data.whole_for_measures", f"`{func}()` reads the training loader "
                    f"`{code}` (sharded) and does not train: it is given the loader read "
                    f"whole (`{name}({code})`), so every rank measures the whole "
                    "set, as the single process does, and decides alike on what it returns")
    return True


def _read_whole(ctx: Context, at: cst.CSTNode, loader: cst.BaseExpression) -> str:
    """`whole_loader(loader)` in place of `loader`, the helper defined where `at` is."""
    name = ctx.names.whole_loader
    ctx.need("torch", "sampler", at=at)
    ctx.define_helper("whole_loader", at, whole_loader_code(ctx.names))
    ctx.plan.rewrite(loader, lambda node: expression(f"{name}({code_of(node)})"))
    return name


def _shared_whole(ctx: Context, loader: cst.Call) -> bool:
    """Is `loader`'s sampler one whole_loader can undo: none given (a DistributedSampler
    now), or torch's drawing without replacement (shared out by RankShareSampler)?"""
    given = keyword(loader, "sampler")
    if given is None:
        return True
    made = sampler_made(ctx.facts, loader, given.value)
    replacement = keyword(made, "replacement") if isinstance(made, cst.Call) else None
    return isinstance(made, cst.Call) and ctx.facts.call_name(made) in SHAREABLE and (
        replacement is None or dotted(replacement.value) == "False")


def _returned(ctx: Context, made: cst.Call, helper: cst.FunctionDef) -> bool:
    """Does `helper` return the loader `made` makes (itself, or a name bound to it)?"""
    facts = ctx.facts
    parent = facts.parent.get(made)
    bound = {dotted(t.target) for t in parent.targets} if isinstance(parent, cst.Assign) \
        else set()
    return any(facts.function(ret) is helper and ret.value is not None and (
        ret.value is made or dotted(ret.value) in bound - {None}) for ret in facts.returns)


def whole_loader_code(n: Names) -> str:
    return f'''

def {n.whole_loader}(loader):
    """distrun: `loader` read whole on every rank (it is sharded for training): the same
    order as the original's (torch's generator, or its sampler's own)."""
    data, sampler = torch.utils.data, loader.sampler
    if isinstance(sampler, {n.sampler}):
        sampler = data.RandomSampler(loader.dataset, generator=loader.generator) \\
            if sampler.shuffle else data.SequentialSampler(loader.dataset)
    elif {{"sampler", "own"}} <= vars(sampler).keys():  # the sampler it shares out
        sampler, own = sampler.sampler, sampler.own
        if hasattr(sampler, "generator"):
            sampler.generator = own
    else:
        return loader
    return data.DataLoader(
        loader.dataset, batch_size=loader.batch_size, sampler=sampler,
        drop_last=loader.drop_last, num_workers=loader.num_workers,
        collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn, prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers, generator=loader.generator)
'''
