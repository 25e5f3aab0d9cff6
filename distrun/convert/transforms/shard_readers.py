"""What reads a sharded training loader elsewhere (part of the data transform): a function
that measures with it (an accuracy over the training set) and progress printed against the
whole dataset. Both are findings: each rank now sees 1/WORLD_SIZE of it.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.context import Context
from distrun.convert.idioms import origin_names, trains, unwrap_iter


def measured_on_training_data(ctx: Context, sharded: set[str]) -> None:
    """A sharded training loader handed to a function that does not train (an accuracy
    check): it now sees each rank's part only, and says it measured the whole."""
    facts = ctx.facts
    for call in facts.calls:
        found = ctx.flow.callee(call)
        if found is None or trains(facts, found[0], flow=ctx.flow):
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
            name = found[0].name.value
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
