"""Reshuffling each epoch (part of the data transform): `loader.sampler.set_epoch(epoch)`
at the start of the loop around the epoch, also when that loop is in a caller (the loader
passed as a parameter, kept in `self.`, or a module-level loader read in a function that
runs once per epoch); without an epoch number (a `while` loop, a function run once per
epoch, a new `iter(loader)` in a step loop, a generator's endless passes over the
loader), the sampler's own count goes on.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.build import statement
from distrun.convert.context import Context
from distrun.convert.idioms import DATALOADER, TrainLoop, assigns_inside, origin_names, unwrap_iter
from distrun.convert.syntax import walk
from distrun.convert.transforms.auto_epoch import define_auto_epoch


def place_set_epochs(ctx: Context, loops: list[TrainLoop], epoched: set[str]) -> None:
    """`set_epoch` for each training loop over a sharded loader, also one the loop reads
    through a local alias (`if mode == 'train': load = train_loader`, then `for ... in
    load:`): after the alias's statement, in its branch, with the sampler's own count."""
    facts = ctx.facts
    placed: set[tuple[int, str]] = set()
    for tl in loops:
        if origin_names(facts, tl.loader, facts.scope(tl.loop), 0) & epoched:
            place_set_epoch(ctx, tl.loop, tl.loader, facts.scope(tl.loop), 0, placed)
        elif not ctx.target.loaders_count_epochs:
            epoch_loop = next(iter(facts.enclosing_loops(tl.loop)), None)
            for stmt, source in _aliases(ctx, tl, epoched):
                if epoch_loop is not None and not facts.inside(stmt, epoch_loop):
                    # `dataloader = self.dataloader` before the epochs: at each epoch's start
                    _alias_each_epoch(ctx, epoch_loop, tl.loader, source, placed)
                elif (id(stmt), source) not in placed:
                    placed.add((id(stmt), source))
                    _insert_set_epoch(ctx, stmt, source, None, tl.loop, after=True)


def _alias_each_epoch(ctx: Context, epoch_loop: cst.For | cst.While, alias: str, source: str,
                      placed: set[tuple[int, str]]) -> None:
    """`alias.sampler.set_epoch(epoch)` first in the epoch loop (guarded where the loader is
    one its class is given, `self.dataloader`: other callers may give another kind)."""
    body = epoch_loop.body
    if (id(epoch_loop), alias) in placed or not isinstance(body, cst.IndentedBlock):
        return
    placed.add((id(epoch_loop), alias))
    var = _first_name(epoch_loop.target) if isinstance(epoch_loop, cst.For) else None
    _insert_set_epoch(ctx, body.body[0], alias, var, epoch_loop, source.startswith("self."))


def _aliases(ctx: Context, tl: TrainLoop, epoched: set[str]
             ) -> list[tuple[cst.CSTNode, str]]:
    """The statements `load = train_loader` binding the loop's loader name, in the loop's
    function, to a sharded loader: each with the loader it names."""
    facts = ctx.facts
    func = facts.function(tl.loop)
    found: list[tuple[cst.CSTNode, str]] = []
    for assign in facts.assigns:
        if "." in tl.loader or not isinstance(assign, cst.Assign) or len(
                assign.targets) != 1 or facts.function(assign) is not func:
            continue
        target, source = assign.targets[0].target, dotted(assign.value)
        stmt = facts.statement(assign)
        if isinstance(target, cst.Name) and target.value == tl.loader and source and stmt \
                and origin_names(facts, source, facts.scope(assign), 0) & epoched:
            found.append((stmt, source))
    return found


def place_set_epoch(ctx: Context, at: cst.CSTNode, loader: str,
                     scope: cst.CSTNode, depth: int, placed: set[tuple[int, str]]) -> None:
    facts, plan = ctx.facts, ctx.plan
    epoch_loop = next(iter(facts.enclosing_loops(at)), None)
    if epoch_loop is not None:
        body = epoch_loop.body
        target = epoch_loop.target if isinstance(epoch_loop, cst.For) else None
        var = _first_name(target) if target is not None else None
        if var is not None and any(not assigns_inside(facts, up, loader)
                                   for up in facts.enclosing_loops(epoch_loop)):
            var = None  # rounds of epochs over one loader: the sampler's own count goes on
        if not isinstance(body, cst.IndentedBlock):
            plan.finding(epoch_loop, "data.no_epoch_variable",
                         "found no epoch variable to reshuffle with",
                         f"call `{loader}.sampler.set_epoch(epoch)` at the start of each epoch")
            return
        key = (id(epoch_loop), loader)
        if key in placed:
            return
        placed.add(key)
        first = body.body[0]
        if "." not in loader and assigns_inside(facts, epoch_loop, loader):
            first = facts.statement(at) or first
        _insert_set_epoch(ctx, first, loader, var, epoch_loop, _given_by_several(
            facts, epoch_loop, loader))
        return
    if isinstance(scope, cst.FunctionDef) and _is_global(facts, scope, loader):
        _set_epoch_in_function(ctx, at, loader, scope, placed)
        return
    if not isinstance(scope, cst.FunctionDef) or depth >= 3:
        plan.finding(at, "data.no_epoch_loop", "found no epoch loop around this training loop",
                     f"call `{loader}.sampler.set_epoch(epoch)` at the start of each epoch")
        return
    sites = ctx.flow.call_sites(scope)  # (`trainer.train_epoch()` on an instance too)
    for site, is_method in sites:
        if loader.startswith("self."):
            receiver = site.func.value if isinstance(site.func, cst.Attribute) else None
            held_by = dotted(receiver) if receiver is not None else None
            arg_code: str | None = loader if held_by in (None, "self") else \
                f"{held_by}.{loader.removeprefix('self.')}"  # the instance's own loader
        else:
            arg = facts.argument_for(site, scope, is_method, loader)
            arg_code = dotted(arg) if arg is not None else None
        if arg_code is not None:
            place_set_epoch(ctx, site, arg_code, facts.scope(site), depth + 1, placed)
    if not sites:
        plan.finding(at, "data.no_epoch_loop", "found no epoch loop around this training "
                     "loop, nor a call of its function",
                     f"call `{loader}.sampler.set_epoch(epoch)` at the start of each epoch")

def set_epoch_on_new_iterators(ctx: Context, sharded: set[str]) -> None:
    """A step loop drawing batches with `next(it)` from `it = iter(loader)`: each new
    iterator is a new pass over the data, so the sampler's epoch moves on before it."""
    facts = ctx.facts
    for call in facts.calls:
        if facts.call_name(call) != "iter" or len(call.args) != 1:
            continue
        loader = dotted(call.args[0].value)
        stmt = facts.statement(call)
        if loader is None or stmt is None or not origin_names(
                facts, loader, facts.scope(call)) & sharded:
            continue
        if isinstance(facts.parent.get(stmt), cst.IndentedBlock | cst.Module) and _assigns(
                stmt, call):
            _insert_set_epoch(ctx, stmt, loader, None, call)


def _assigns(stmt: cst.CSTNode, call: cst.Call) -> bool:
    """`it = iter(loader)`: an iterator kept to draw batches from, a new pass over the
    data. Not a peek such as `len(next(iter(loader))[0])`: it reads one batch of the
    pass to come, and moving the epoch on before it would shuffle each epoch with the
    next epoch's seed."""
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Assign | cst.AnnAssign) and small.value is call
        for small in stmt.body)

def _given_by_several(facts: Facts, at: cst.CSTNode, loader: str) -> bool:
    """Is `loader` a parameter of the function around `at` that several callers give a
    loader (a generic `fit(train_loader, ...)`: one caller's loader may have a
    DistributedSampler, another's a batch sampler of its own)?"""
    func = facts.function(at)
    return func is not None and "." not in loader and loader in facts.params(
        func, facts.enclosing_class(func) is not None) and len(facts.call_sites(func)) > 1


def _insert_set_epoch(ctx: Context, before: cst.CSTNode, loader: str, epoch: str | None,
                      where: cst.CSTNode, guarded: bool = False, after: bool = False) -> None:
    """`loader.sampler.set_epoch(epoch)` before `before`; without an epoch number (a
    `while` loop, a function run once per epoch), the sampler's own count goes on.
    `guarded`: only where the loader's sampler has a `set_epoch` (a function several
    callers give loaders of different kinds)."""
    if epoch is None and ctx.target.loaders_count_epochs:
        return  # accelerate's prepared loaders count their epochs themselves
    held = not guarded and _held(ctx, loader, where)
    guarded = guarded or held
    if epoch is None:
        call = f"{loader}.sampler.set_epoch({loader}.sampler.epoch + 1)"
    else:
        call = ctx.target.set_epoch(loader, epoch)
    line = statement(f'if hasattr({loader}.sampler, "set_epoch"):\n    {call}\n') if (
        guarded and call.startswith(f"{loader}.sampler.set_epoch(")) else statement(f"{call}\n")
    if after:
        ctx.plan.insert_after(before, [line])
    else:
        ctx.plan.insert_before(before, [line])
    ctx.plan.change(where, "data.set_epoch",
                    f"`{call}` at the start of each epoch, so every epoch gets "
                    "a new shuffle" + (f" (where its sampler has one: `{loader}` is a "
                                       "loader its class is given)" if held else
                                       f" (where its sampler has one: the callers of "
                                       f"this function give `{loader}` loaders of several "
                                       "kinds)" if guarded else ""))


def _held(ctx: Context, loader: str, where: cst.CSTNode) -> bool:
    """`self.loader` of a class that builds no DataLoader: a holder given loaders by its
    callers (a prefetcher around the training and the validation loaders), whose sampler
    may have no `set_epoch`."""
    cls = ctx.facts.enclosing_class(where)
    return loader.startswith("self.") and cls is not None and not any(
        (ctx.facts.call_name(c) or "") in DATALOADER for c in ctx.facts.calls_in(cls))


def _is_global(facts: Facts, scope: cst.FunctionDef, loader: str) -> bool:
    """Is `loader` a module-level name read inside the function `scope`?"""
    return ("." not in loader and loader not in facts.params(scope, False)
            and not assigns_inside(facts, scope, loader))


def _set_epoch_in_function(ctx: Context, loop: cst.CSTNode, loader: str,
                           func: cst.FunctionDef, placed: set[tuple[int, str]]) -> None:
    """A module-level loader iterated in `def train(epoch)`, run once per epoch: the
    epoch is set right before the loop, from the parameter that receives the caller's
    epoch (or the sampler's own count)."""
    facts = ctx.facts
    key = (id(loop), loader)
    if key in placed:
        return
    placed.add(key)
    param = _epoch_parameter(facts, func)
    stmt = facts.statement(loop)
    assert stmt is not None
    _insert_set_epoch(ctx, stmt, loader, param, loop)


def _epoch_parameter(facts: Facts, func: cst.FunctionDef) -> str | None:
    """The parameter of `func` that every caller fills with its epoch loop's variable."""
    found: set[str | None] = set()
    for site, is_method in facts.call_sites(func):
        loop = next(iter(facts.enclosing_loops(site)), None)
        var = _first_name(loop.target) if isinstance(loop, cst.For) else None
        param = facts.param_for(site, func, is_method, var) if var else None
        found.add(param)
    return found.pop() if len(found) == 1 else None


def _first_name(target: cst.BaseExpression) -> str | None:
    if isinstance(target, cst.Name):
        return target.value
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
        return _first_name(target.elements[0].value)
    return None


def set_epoch_in_endless_passes(ctx: Context, sharded: set[str]) -> None:
    """`def infiniteloop(dataloader): while True: for x, y in iter(dataloader): yield x`
    given a sharded loader (pytorch-ddpm, many diffusion and GAN trainers, read with
    `next()` in a step loop): each pass of the `while` is a new pass over the data, so the
    sampler's epoch moves on before it (its own count), as a new epoch would."""
    facts = ctx.facts
    for loop in facts.for_loops:
        func = facts.function(loop)
        source = unwrap_iter(facts, loop.iter)
        if isinstance(source, cst.Call) and facts.call_name(source) == "iter" and source.args:
            source = source.args[0].value
        param = dotted(source)
        outer = next(iter(facts.enclosing_loops(loop)), None)
        if func is None or param is None or not isinstance(outer, cst.While) or not any(
                isinstance(n, cst.Yield) and facts.function(n) is func for n in walk(loop)):
            continue
        is_method = facts.enclosing_class(func) is not None
        if param not in facts.params(func, is_method):
            continue
        sites = [(site, m) for site, m in ctx.flow.call_sites(func)]
        given = [facts.argument_for(site, func, m, param) for site, m in sites]
        if not any(arg is not None and dotted(arg) is not None and origin_names(
                facts, str(dotted(arg)), facts.scope(site), 0) & sharded
                for arg, (site, _) in zip(given, sites, strict=True)):
            continue
        _insert_set_epoch(ctx, loop, param, None, loop, guarded=len(sites) > 1)


def feeds_endlessly(facts: Facts, func: cst.FunctionDef) -> bool:
    """Is `func` a generator that yields from a loop over its data (it feeds a training
    loop, it measures nothing)?"""
    return any(isinstance(n, cst.Yield) and facts.function(n) is func
               and next(iter(facts.enclosing_loops(n)), None) is not None for n in walk(func))


def sampler_code(ctx: Context, call: cst.Call, args: str, auto_epoch: bool,
                 shuffle: str = "True", alone: bool = False) -> str:
    """The sampler given to the training DataLoader `call`: a DistributedSampler, or one
    that moves on after each pass where passes are not followed (`auto_epoch`), and also
    where the loader is made again (each epoch, inline in `iter(...)`): a new
    DistributedSampler would start at epoch 0 every time, the same order and shares each
    epoch where the original reshuffles (`shuffle`: the loader's shuffle, as code). The
    script's only DataLoader call (`alone`) made in a loop over the phases with a shuffle
    that depends on the phase (`shuffle=split == 'train'`) is sharded only where it
    shuffles: an unshuffled one is an evaluation, left whole."""
    n = ctx.names
    again = shuffle != "False" and made_again(ctx, call)
    if not (auto_epoch or again):
        made = f"{n.sampler}({args})"
    else:
        define_auto_epoch(ctx, call, again)
        place = f"{ctx.facts.module_of(call).name}:{ctx.facts.line(call)}"
        made = f'{n.auto_epoch}({args}, again="{place}")' if again else \
            f"{n.auto_epoch}({args})"
    phases = alone and shuffle not in ("True", "False") and made_again(ctx, call)
    return f"({made} if {shuffle} else None)" if phases else made


def made_again(ctx: Context, call: cst.Call) -> bool:
    """Is the DataLoader `call` made anew during the training: inline in `iter(...)`, in a
    loop of its function, or in a function called in a loop?"""
    facts = ctx.facts
    arg = facts.parent.get(call)
    outer = facts.parent.get(arg) if isinstance(arg, cst.Arg) else None
    if isinstance(outer, cst.Call) and facts.call_name(outer) == "iter":
        return True
    if next(iter(facts.enclosing_loops(call)), None) is not None:
        return True
    func = facts.function(call)
    return func is not None and any(next(iter(facts.enclosing_loops(site)), None) is not None
                                    for site, _ in ctx.flow.call_sites(func))
