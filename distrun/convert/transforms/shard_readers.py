"""What reads a sharded training loader elsewhere (part of the data transform): a function
that measures with it (an accuracy over the training set) and progress printed against the
whole dataset, both findings: each rank now sees 1/WORLD_SIZE of it; and a learning-rate
schedule's step count made from the whole dataset's length, made this rank's share.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import origin_names, trains, unwrap_iter
from distrun.convert.syntax import walk
from distrun.convert.transforms.epochs import feeds_endlessly
from distrun.convert.transforms.loader_names import construction_names
from distrun.convert.transforms.memory_bank import memory_sites
from distrun.convert.transforms.whole_loaders import whole_given, whole_where_measured


def read_elsewhere(ctx: Context, sharded: set[str], loaders: list[cst.Call]) -> None:
    """What reads the sharded training loaders (`sharded`, made by `loaders`) elsewhere."""
    measured_on_training_data(ctx, sharded)
    whole_for_library_measures(ctx, sharded)
    progress_of_the_whole(ctx, sharded)
    scheduled_on_the_whole(ctx, sharded, loaders)
    whole_where_measured(ctx)


def measured_on_training_data(ctx: Context, sharded: set[str]) -> None:
    """A sharded training loader handed to a function that does not train (an accuracy
    check, DARTS' validation on the architecture's half): it would see each rank's part
    only and say it measured the whole, and the ranks would decide apart on what it
    returns (the best so far). A DataLoader is given the same loader read whole
    (`whole_loader(valid_loader)`); anything else is reported."""
    facts = ctx.facts
    for call in facts.calls:
        found = ctx.flow.callee(call)
        if found is None or trains(facts, found[0], flow=ctx.flow) or feeds_endlessly(
                facts, found[0]):
            continue
        func, is_method = found
        for arg in call.args:
            code = dotted(arg.value)
            if code is None or not origin_names(facts, code, facts.scope(call)) & sharded:
                continue
            param = facts.param_for(call, func, is_method, code)
            if param is None or not any(
                    dotted(unwrap_iter(facts, loop.iter)) == param and facts.inside(loop, func)
                    for loop in facts.for_loops):
                continue  # not iterated there (a trainer keeping it for later)
            if any(facts.inside(site, func) for site, _ in memory_sites(ctx)):
                continue  # it fills a memory of the batch's items: gathered from every rank
            name = found[0].name.value
            if whole_given(ctx, call, arg.value, name, code):
                continue
            ctx.plan.finding(call, "data.measured_on_shard",
                             f"`{name}()` reads the training loader `{code}`, "
                             "now sharded: on each rank it measures 1/WORLD_SIZE of the "
                             "training set (and what it divides by may still be the whole)",
                             f"give `{name}()` a DataLoader over the same dataset without the "
                             "sampler, or all-reduce its sums (`dist.all_reduce`)")


def progress_of_the_whole(ctx: Context, sharded: set[str]) -> None:
    """`print(f"[{i * len(x)}/{len(loader.dataset)}]")` on a sharded loader: each rank
    reads 1/WORLD_SIZE of the dataset, so the progress ends at that fraction."""
    facts = ctx.facts
    for call in facts.calls:
        if facts.call_name(call) != "len" or len(call.args) != 1:
            continue
        value = call.args[0].value
        if not (isinstance(value, cst.Attribute) and value.attr.value == "dataset"):
            continue
        code = dotted(value.value)
        if code is None or not origin_names(facts, code, facts.scope(call)) & sharded:
            continue
        if any(isinstance(a, cst.Call) and facts.call_name(a) == "print"
               for a in facts.ancestors(call)):
            ctx.plan.finding(call, "data.progress", f"this progress counts against the whole "
                             f"`{code}.dataset`, but each rank now reads 1/WORLD_SIZE of it: "
                             "it ends near 1/WORLD_SIZE of the total",
                             f"count against `len({code}.sampler)`, this rank's share",
                             severity="info")


_SCHEDULES = ("torch.optim.lr_scheduler.", "transformers.get_", "transformers.optimization.get_",
              "diffusers.optimization.get_")


def scheduled_on_the_whole(ctx: Context, sharded: set[str], loaders: list[cst.Call]) -> None:
    """`steps_per_epoch = len(train_dataset) // batch_size` given to a learning-rate
    schedule (OneCycleLR, a warm-up's `num_training_steps`): the dataset is sharded now, so
    the count is WORLD_SIZE times this rank's steps and the schedule would be stretched (a
    one-cycle never anneals), silently. `len(dataset)` becomes this rank's share, the
    DistributedSampler's own count: `(len(dataset) + WORLD_SIZE - 1) // WORLD_SIZE`."""
    facts, n = ctx.facts, ctx.names
    datasets = {d for call in [*loaders, *ctx.train_loaders]
                if call in ctx.train_loaders or construction_names(facts, call) & sharded
                for d in [_dataset_of(call)] if d is not None}
    done: set[int] = set()
    for schedule in facts.calls:
        if not (facts.call_name(schedule) or "").startswith(_SCHEDULES) and not \
                _steps_drawn(facts, schedule):
            continue
        for count in _counts_feeding(ctx, schedule):
            read = dotted(count.args[0].value)
            if read is None or id(count) in done or not (read in datasets or (
                    read.endswith(".dataset") and origin_names(
                        facts, read.rsplit(".", 1)[0], facts.scope(count)) & sharded)):
                continue
            done.add(id(count))
            ctx.plan.rewrite(count, lambda node: expression(
                f"({code_of(node)} + {n.world_size} - 1) // {n.world_size}"))
            what = "the step loop" if _steps_drawn(facts, schedule) else "the schedule"
            ctx.plan.change(count, "data.schedule_share", f"`{facts.code(count)}` counts "
                            f"the whole dataset for {what} of line {facts.line(schedule)}"
                            ", but each rank now reads 1/WORLD_SIZE of it: this rank's share "
                            f"(`(... + {n.world_size} - 1) // {n.world_size}`, the "
                            "DistributedSampler's count), so the schedule spans the steps "
                            "each rank takes")


# library functions that read a whole loader to measure, not to train
_MEASURE_WHOLE = frozenset({"torch.optim.swa_utils.update_bn"})


def whole_for_library_measures(ctx: Context, sharded: set[str]) -> None:
    """`torch.optim.swa_utils.update_bn(train_loader, swa_model)`: the averaged model's
    BatchNorm statistics over the training set. On the sharded loader each rank would take
    its own share's, the ranks' models would differ and rank 0 would save its share's: it
    is given the same data unsharded (a DataLoader over the loader's dataset, in order),
    so every rank computes the statistics of the whole set."""
    facts = ctx.facts
    for call in facts.calls:
        args = positional(call)
        if facts.call_name(call) not in _MEASURE_WHOLE or not args:
            continue
        code = dotted(args[0].value)
        if code is None or not origin_names(facts, code, facts.scope(call)) & sharded:
            continue
        ctx.plan.rewrite(args[0].value, lambda node: expression(
            f"torch.utils.data.DataLoader({code_of(node)}.dataset, batch_size="
            f"{code_of(node)}.batch_size, collate_fn={code_of(node)}.collate_fn)"))
        ctx.plan.change(call, "data.measured_on_shard", f"`{facts.code(call.func)}` reads "
                        f"the training loader `{code}`, now sharded: it is given a DataLoader "
                        "over its whole dataset instead, so every rank measures the whole "
                        "training set, as the single process does")


def _steps_drawn(facts: Facts, call: cst.Call) -> bool:
    """Is `call` the `range(...)` of a step loop that draws its batches with `next()`
    (`for iteration in range(start, max_epoch * epoch_size): ... next(batches)`)?"""
    loop = facts.parent.get(call)
    return facts.call_name(call) == "range" and isinstance(loop, cst.For) and \
        loop.iter is call and any(facts.call_name(c) == "next" for c in facts.calls_in(loop.body))


def _dataset_of(call: cst.Call) -> str | None:
    given = keyword(call, "dataset")
    args = positional(call)
    value = given.value if given is not None else args[0].value if args else None
    return dotted(value) if value is not None else None


def _counts_feeding(ctx: Context, schedule: cst.Call, depth: int = 2) -> list[cst.Call]:
    """The `len(...)` calls in the schedule's arguments, or in the values of the names they
    read, assigned before it in its scope (two names deep)."""
    facts = ctx.facts
    found: list[cst.Call] = []
    todo: list[tuple[cst.CSTNode, int]] = [(a.value, depth) for a in schedule.args]
    while todo:
        node, left = todo.pop()
        for sub in walk(node):
            if isinstance(sub, cst.Call) and facts.call_name(sub) == "len" and sub.args:
                found.append(sub)
            elif isinstance(sub, cst.Name) and left > 0:
                todo += [(a.value, left - 1) for a in facts.assigns
                         if isinstance(a, cst.Assign)
                         and facts.scope(a) is facts.scope(schedule)
                         and facts.line(a) < facts.line(schedule)
                         and any(isinstance(t.target, cst.Name) and t.target.value == sub.value
                                 for t in a.targets)]
    return found
