"""Data: shard every training DataLoader with a DistributedSampler, reshuffle each epoch.

A DataLoader is a training loader when it is iterated by a loop that calls
`.backward()` or `optimizer.step()` (followed through function parameters,
`self.` attributes and helper functions that return loaders), or drawn from with
`next(it)` where the batch goes into a backward pass (`draws.py`), or, failing that,
when its name says so (`train_loader`), or when it is the script's only loader.
It gets `sampler=DistributedSampler(dataset, shuffle=<the loader's old shuffle>)`
and loses `shuffle`, whether that was a keyword, the third positional argument,
or a key of a `**kwargs` dict built elsewhere (read at run time, never mutated).
`loader.sampler.set_epoch(epoch)` goes at the top of the loop around the epoch.

A loader's own sampler of torch's is shared out (`rebuild.share_sampler`), its own
batch_sampler split batch by batch (`batch_samplers.py`).
Evaluation loaders are left whole: every rank evaluates the full set, so sums
divided by `len(loader.dataset)` stay exact. Won't: shard a loader that already
has another sampler, or an IterableDataset (reported with the fix).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional
from distrun.convert.build import Rewrite, code_of, expression, keyword_arg, with_commas
from distrun.convert.context import Context, EvalLoader, Transform
from distrun.convert.draws import drawn_for_training, passes_followed
from distrun.convert.idioms import (
    DATALOADER,
    ITERABLE_DATASET,
    is_backward,
    origin_names,
    train_loops,
    unwrap_iter,
)
from distrun.convert.object_flow import Place
from distrun.convert.transforms.batch_samplers import sampler_made, share_batch_sampler
from distrun.convert.transforms.batches import share_hand_made
from distrun.convert.transforms.dataset_names import hoist_dataset
from distrun.convert.transforms.epochs import (
    place_set_epochs,
    sampler_code,
    set_epoch_in_endless_passes,
    set_epoch_on_new_iterators,
)
from distrun.convert.transforms.full_batch import full_batch
from distrun.convert.transforms.loader_holders import holder_names
from distrun.convert.transforms.loader_names import (
    EVAL_NAME,
    builds_both,
    classify,
    construction_names,
    reached_names,
    stays_in_its_function,
)
from distrun.convert.transforms.noise_draws import reseed_noise
from distrun.convert.transforms.phase_loaders import shard_phase_loaders
from distrun.convert.transforms.random_draws import share_random_draws
from distrun.convert.transforms.rebuild import (
    batch_samplers,
    draw_per_rank,
    rebuild_unseen_loaders,
    share_sampler,
)
from distrun.convert.transforms.shard_readers import read_elsewhere
from distrun.convert.transforms.slices import share_slices
from distrun.convert.transforms.splits import same_splits
from distrun.convert.transforms.statistics_pass import statistics_pass
from distrun.convert.transforms.train_metrics import reduce_train_metrics

_LOADER_PARAMS = [
    "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
    "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
]


def plan_data(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    same_splits(ctx)
    loaders = [c for c in facts.calls if facts.call_name(c) in DATALOADER]
    loops = train_loops(facts, ctx.flow)
    train_names: set[str] = set()
    for tl in loops:
        train_names |= origin_names(facts, tl.loader, facts.scope(tl.loop), 0)
    drawn: set[str] = set()
    repassed: set[str] = set()  # drawn through zip/cycle/a generator: passes not followed
    drawn_loaders = drawn_for_training(facts, ctx.flow)  # `next(self.it)` in a step loop
    for loader in drawn_loaders:
        code = dotted(loader)
        assert code is not None
        drawn |= (got := origin_names(facts, code, facts.scope(loader), 0))
        repassed |= got if not passes_followed(facts, loader) else set()
    looped = set(train_names)
    train_names |= drawn
    fed: dict[Place, set[str]] = {}  # the objects training reads -> the names it reads
    for read in [unwrap_iter(facts, tl.loop.iter) for tl in loops] + drawn_loaders:
        place, code = ctx.flow.place_of(read), dotted(read)
        if place is not None and code is not None:
            fed.setdefault(ctx.flow.root(place), set()).update(
                origin_names(facts, code, facts.scope(read), 0))
    sharded: set[str] = set()
    epoched: set[str] = set()  # sharded by a sampler whose epoch moves on (not batch_sampler)
    mixed: set[str] = set()
    by_phase = shard_phase_loaders(ctx, loaders)
    for call in loaders:
        names = construction_names(facts, call)
        if id(call) in by_phase:
            sharded |= names
            continue
        kind, why = classify(names, train_names, len(loaders))
        if names & train_names and stays_in_its_function(
                facts, call, names, [tl.loop for tl in loops] + list(drawn_loaders)):
            kind, why = classify(names, set(), len(loaders))  # a namesake of another's
        if names & drawn and not names & looped:
            why = "its batches, drawn with `next()`, go into training" + (
                "; its sampler moves to the next epoch after each pass" * bool(names & repassed))
        reached = reached_names(ctx, call, fed) if kind == "unknown" else set()
        if reached:  # the names it is read by there, for set_epoch
            kind, why, names = "train", "it reaches the training loop", names | reached
        auto_epoch = bool(names & repassed) and not names & looped
        held = holder_names(facts, call) if kind == "unknown" else None
        if held is not None:  # made in a loader class: the names of its objects tell
            kind, why = classify(set(held.names), train_names, 0)
            auto_epoch, why = kind == "train", f"`{held.cls}` makes it, its objects bound to " \
                f"{', '.join(f'`{n}`' for n in sorted(held.names))}: {why or 'not training'}"
        if kind == "unknown" and statistics_pass(ctx, call, names):
            plan.finding(call, "data.statistics_pass",
                         "DataLoader read only by a pass that does not train (in "
                         f"`{facts.function(call).name.value}`, which never steps an "  # type: ignore[union-attr]
                         "optimizer): left whole, every rank computes it over all the data",
                         severity="info")
            continue
        if kind == "unknown" and _shuffles(facts, call):
            kind, auto_epoch = "train", True
            why = ("it shuffles: a training loader (an evaluation's order does not matter); "
                   "where its passes start is not followed, so its sampler moves to the next "
                   "epoch after each pass")
        if kind in ("train", "eval") and builds_both(facts, call, names, train_names):
            mixed |= names
            plan.finding(call, "data.mixed_helper",
                         "this function builds training and evaluation loaders "
                         f"({', '.join(sorted(names))}): left as it is; the training one is "
                         "sharded where it is used", severity="info")
        elif kind == "train":
            if _add_sampler(ctx, call, why, auto_epoch):
                sharded |= names
                epoched |= names if keyword(call, "batch_sampler") is None else set()
        elif kind == "eval" and ctx.options.eval_shard:
            ctx.eval_loaders.append(EvalLoader(call, frozenset(names)))
        elif kind == "eval":
            plan.finding(call, "data.eval_unsharded",
                         "evaluation DataLoader left unsharded: every rank "
                         "evaluates the full set, so its metrics are exact", severity="info")
        else:
            plan.finding(call, "data.unknown_loader",
                         "cannot tell whether this DataLoader is for training; "
                         "left unsharded (every rank reads all of it)",
                         "if it feeds training, pass `sampler=DistributedSampler(dataset, "
                         "shuffle=...)` and drop `shuffle`")
    built = {n for call in loaders for n in construction_names(facts, call)} - mixed
    rebuilt = rebuild_unseen_loaders(ctx, loops, built)
    if mixed and not rebuilt and not sharded:  # "sharded where it is used": it was not
        plan.finding(None, "data.unknown_loader", "a helper builds the training and the "
                     "evaluation loaders, and where the training one is used was not found: "
                     "left unsharded (every rank reads all of it)", "shard it where it is "
                     "bound: `sampler=DistributedSampler(dataset, shuffle=True)` in the "
                     "helper's call for training, `shuffle` dropped")
    # (a rebuilt loader may hold a batch sampler: no `.sampler.set_epoch`, its own order)
    sharded, epoched = sharded | rebuilt, epoched | (set() if batch_samplers(facts) else rebuilt)
    hand_made = share_hand_made(ctx, sharded) | share_slices(ctx)
    ctx.hand_shared = hand_made
    _unshared_streams(ctx)
    if not loaders and not sharded and not hand_made and not share_random_draws(ctx) \
            and not full_batch(ctx):
        plan.finding(_training_loop(facts), "data.no_loader",
                     "no DataLoader found: batches seem to be built by hand, "
                     "so every rank would train on the same data",
                     "wrap the data in a Dataset and a DataLoader, or slice it per rank: "
                     "`data[RANK::WORLD_SIZE]`")
        return
    place_set_epochs(ctx, loops, epoched)
    if not ctx.target.loaders_count_epochs:
        set_epoch_on_new_iterators(ctx, epoched)
        set_epoch_in_endless_passes(ctx, epoched)
    read_elsewhere(ctx, sharded, loaders)
    reduce_train_metrics(ctx, sharded, loaders)
    if loaders or sharded or hand_made:
        reseed_noise(ctx)


TRANSFORM = Transform("data", plan_data)


def _training_loop(facts: Facts) -> cst.CSTNode | None:
    """Where batches are trained on: the loop around the first backward pass (or the pass
    itself, or None: the whole script)."""
    backward = next((c for c in facts.calls if is_backward(c)), None)
    if backward is None:
        return None
    return next(iter(facts.enclosing_loops(backward)), backward)


_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "no_grad", "inference_mode"})


def _shuffles(facts: Facts, call: cst.Call) -> bool:
    """`DataLoader(..., shuffle=True)` (a literal True), made outside an evaluation: not in
    a function named for one (evaluate, test, val...) or run without gradients
    (`@torch.no_grad()`, `@torch.inference_mode()`, `with torch.no_grad():`)."""
    given = keyword(call, "shuffle")
    if given is None or dotted(given.value) != "True":
        return False
    for node in facts.ancestors(call):
        if isinstance(node, cst.FunctionDef):
            if EVAL_NAME.search(node.name.value) or any(
                    _no_grad(facts, d.decorator) for d in node.decorators):
                return False
        if isinstance(node, cst.With) and any(_no_grad(facts, i.item) for i in node.items):
            return False
    return True


def _no_grad(facts: Facts, expr: cst.BaseExpression) -> bool:
    target = expr.func if isinstance(expr, cst.Call) else expr
    return (facts.qualname(target) or dotted(target) or "") in _NO_GRAD


def _add_sampler(ctx: Context, call: cst.Call, why: str, auto_epoch: bool = False) -> bool:
    facts, plan = ctx.facts, ctx.plan
    given = keyword(call, "sampler")
    made = sampler_made(facts, call, given.value) if given is not None else None
    if isinstance(made, cst.Call) and draw_per_rank(ctx, made, call):
        return False  # each rank draws its own: no DistributedSampler, no set_epoch
    if given is not None and ctx.target.take_loader(ctx, call, why):
        return True  # accelerate shards a loader's own sampler itself
    if given is not None and share_sampler(ctx, call, given.value):
        ctx.train_loaders.append(call)
        return True
    batches = keyword(call, "batch_sampler")
    if batches is not None and given is None and len(positional(call)) <= 3:
        share_batch_sampler(ctx, call, batches.value, why)  # no set_epoch: the original's
        ctx.train_loaders.append(call)
        return True
    if given or batches or len(positional(call)) > 3:
        plan.finding(call, "data.own_sampler", "this training DataLoader already has a sampler: "
                     "it was not sharded, so every rank reads the whole dataset",
                     "shard it yourself: wrap the sampler's indices per rank, or use "
                     "`DistributedSampler(dataset, shuffle=...)`")
        return False
    pos = positional(call)
    ds_arg = keyword(call, "dataset") or (pos[0] if pos else None)
    if ds_arg is None:
        return False
    stream = _iterable_dataset(facts, ds_arg.value)
    if stream is not None:  # no sampler: its training loops go through rank_batches
        ctx.stream_loaders[call] = stream
        return False
    ctx.train_loaders.append(call)
    if ctx.target.take_loader(ctx, call, why):
        return True
    ds_code = dotted(ds_arg.value)
    if ds_code is None:
        hoisted = hoist_dataset(ctx, call, ds_arg)
        if hoisted is None:
            return False
        ds_code = hoisted
    shuffle_arg = keyword(call, "shuffle") or (pos[2] if len(pos) > 2 else None)
    stars = [a for a in call.args if a.star == "**"]
    if shuffle_arg is not None:
        shuffle = facts.code(shuffle_arg.value)
    elif stars:
        merged = ", ".join(f"**{facts.code(a.value)}" for a in stars)
        source = facts.code(stars[0].value) if len(stars) == 1 else f"{{{merged}}}"
        shuffle = f'{source}.get("shuffle", False)'
    else:
        shuffle = "False"
    # In a module other than the entry, the sampler is told the world (from the
    # environment): another entry point importing the module without a process group
    # (an evaluation script) still gets its loader, whole.
    place = "" if facts.module_of(call).is_entry else \
        f", num_replicas={ctx.names.world_size}, rank={ctx.names.rank}"
    sampler = sampler_code(ctx, call, f"{ds_code}, shuffle={shuffle}{place}", auto_epoch,
                           shuffle, "only DataLoader" in why)
    ctx.need("sampler", at=call)
    plan.rewrite(call, _rebuild_loader(sampler))
    plan.change(call, "data.sampler",
                f"DataLoader sharded with `{sampler}` ({why}); `shuffle` moved "
                "to the sampler. Each rank now reads 1/WORLD_SIZE of the data: the global batch "
                "is batch_size x WORLD_SIZE" + (
                    "; the order comes from the sampler's own seed (0 + epoch), not torch's "
                    "generator: even on 1 process the batches differ from the original's" + (
                        ", and so do torch's later draws (a model built after training): "
                        "the original's loader took a number from its generator each epoch"
                        if "AutoEpochSampler" not in sampler else "")
                    if shuffle != "False" else "") + (
                    "; the loader is made anew during training: each new sampler goes on "
                    "from the epoch the last one reached" if "again=" in sampler else ""))
    plan.shards_batches(call)
    return True


def _iterable_dataset(facts: Facts, expr: cst.BaseExpression) -> cst.ClassDef | None:
    """The script's IterableDataset class `expr` is an instance of, if it is one."""
    if isinstance(expr, cst.Name):
        for name in facts.names:
            parent = facts.parent.get(name)
            if name.value == expr.value and isinstance(parent, cst.AssignTarget):
                assign = facts.parent.get(parent)
                found = _iterable_dataset(facts, assign.value) if isinstance(
                    assign, cst.Assign) else None
                if found is not None:
                    return found
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        cls = facts.local_definition(expr)
        if isinstance(cls, cst.ClassDef) and any(
                facts.qualname(b.value) in ITERABLE_DATASET for b in cls.bases):
            return cls
    return None


def _unshared_streams(ctx: Context) -> None:
    """A DataLoader over an IterableDataset whose training loop was not found: an error."""
    for call in ctx.stream_loaders:
        if call not in ctx.streams_shared:
            ctx.plan.finding(call, "data.iterable_dataset",
                             "this DataLoader reads an IterableDataset, and no training loop "
                             "over it was found to share its batches out: every rank would "
                             "read the same items", "iterate it in the training loop "
                             "(`for x, y in loader:`), or keep every WORLD_SIZE-th item in "
                             "the dataset's __iter__")


def _rebuild_loader(sampler: str) -> Rewrite:
    """The sampler takes the place of `shuffle` (its comma, and the comment after it, stay
    where they were), or goes before the `**kwargs`."""
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args: list[cst.Arg] = []
        new_arg = keyword_arg("sampler", expression(sampler))
        placed = False
        pos_index = 0
        for arg in node.args:
            if arg.keyword is None and not arg.star:
                if pos_index == 2:  # positional shuffle: the sampler, by keyword, instead
                    args.append(new_arg.with_changes(comma=arg.comma))
                    placed = True
                    pos_index += 1
                    continue
                if pos_index > 2:
                    arg = keyword_arg(_LOADER_PARAMS[pos_index], arg.value).with_changes(
                        comma=arg.comma)
                pos_index += 1
            elif arg.keyword is not None and arg.keyword.value == "shuffle":
                args.append(new_arg.with_changes(comma=arg.comma))
                placed = True
                continue
            elif arg.star == "**":
                code = code_of(arg.value)
                arg = arg.with_changes(value=expression(f'{{**{code}, "shuffle": False}}'))
            args.append(arg)
        if not placed:
            first_star = next((i for i, a in enumerate(args) if a.star), len(args))
            args.insert(first_star, new_arg)
        return node.with_changes(args=with_commas(args))

    return rewrite
