"""Sharded evaluation (`--eval shard`), exact: each rank evaluates every WORLD_SIZE-th
sample, then the loop's sums are all-reduced, so the printed metrics are the ones one
process prints.

    test_loader = DataLoader(test_set, batch_size=16)
        -> DataLoader(test_set, batch_size=16, sampler=range(RANK, len(test_set), WORLD_SIZE))
    test_loss, correct = 0.0, 0            (unchanged)
    for data, target in test_loader:       the forward goes around the DDP wrapper
        output = model(data)                 -> model.module(data)   (ranks may run a
        test_loss += ...; correct += ...       different number of batches: no collective)
    <after the loop>  sums all-reduced, each keeping its type

No padding (unlike DistributedSampler), so `len(test_loader.dataset)` stays the right
divisor. Won't: shard a loader whose loop does not sum into variables set to a number
before it (left whole, reported: a warning when no loader could be sharded). Refused
(exit 4) when the script has no evaluation loader at all.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional, walk
from distrun.convert.build import code_of, expression, keyword_arg, statements, with_commas
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import origin_names, train_loops, unwrap_iter


def shard_eval_loaders(ctx: Context) -> None:
    """Each evaluation loader whose loops sum their metrics is sharded; refused when the
    script has no evaluation loader at all (the option would do nothing)."""
    facts = ctx.facts
    if not ctx.eval_loaders:
        ctx.refuse(None, "evaluation.no_loader", "--eval shard: the script has no "
                   "evaluation DataLoader (one read under torch.no_grad() or in an "
                   "evaluation function), so there is nothing to shard",
                   "leave --eval shard out")
        return
    train = {id(t.loop) for t in train_loops(facts, ctx.flow)}
    whole = []
    for loader in ctx.eval_loaders:
        loops = []
        for loop in facts.for_loops:
            code = dotted(unwrap_iter(facts, loop.iter))
            if id(loop) in train or code is None:
                continue
            if origin_names(facts, code, facts.scope(loop), 0) & loader.names:
                loops.append(loop)
        if not _shard(ctx, loader.call, loops):
            whole.append(loader)
    none = len(whole) == len(ctx.eval_loaders)  # the option did nothing: a warning
    for loader in whole:
        ctx.plan.finding(loader.call, "evaluation.left_whole",
                         "--eval shard: this evaluation loader was "
                         "left whole (its loop does not sum metrics into variables set to "
                         "a number before it); every rank evaluates the full set, so "
                         "metrics are exact" + (": no evaluation is sharded" if none else ""),
                         "sum the metrics into variables set to a number before the loop "
                         "(`total += ...`), or convert with --eval full" if none else "",
                         severity="warning" if none else "info")


# (FSDP2 and ZeRO-3 refuse --eval shard: each forward pass there is a collective.)
TRANSFORM = Transform("eval", shard_eval_loaders, lambda ctx: ctx.options.eval_shard)


def same_buffers_for_whole(ctx: Context) -> None:
    """An evaluation left whole (the default) calls the model itself: DDP broadcasts rank
    0's buffers only at its own next forward, so each rank would evaluate with its own
    BatchNorm statistics, print its own metric and decide on it (early stopping, the best
    epoch: BlamerX's Kaggle fold loop stopped its ranks at different epochs, and one
    waited for the other at the next fold's first step). After each training loop (a
    point every rank reaches, unlike an evaluation some scripts run on one rank) rank 0's
    buffers go to every rank, so what follows (an evaluation, a save) reads the same."""
    facts, n = ctx.facts, ctx.names
    if not any((facts.call_name(c) or "").endswith(_BUFFERED) or (facts.call_name(
            c) or "").startswith(_LIBRARY_MODELS) for c in facts.calls):
        return  # no buffers a forward updates (none built, no library model)
    done: set[int] = set()
    for tl in train_loops(facts, ctx.flow):
        if id(tl.loop) in done:
            continue
        done.add(id(tl.loop))
        models = list(dict.fromkeys(  # the loop's own steps (a name of its scope)
            facts.code(c.func) for m in ctx.models for c in m.forwards
            if next(iter(facts.enclosing_loops(c)), None) is tl.loop
            and facts.function(c) is facts.function(tl.loop)))
        if not models:
            continue
        buffer = n.fresh("buffer")
        ctx.need("dist", at=tl.loop)
        code = "".join(f"    for {buffer} in {m}.buffers():\n"
                       f"        {n.dist}.broadcast({buffer}, 0)\n" for m in models)
        ctx.plan.insert_after(tl.loop, statements(
            f"if {n.dist}.is_initialized():  # rank 0's BatchNorm statistics on every rank\n"
            + code))
        ctx.plan.change(tl.loop, "evaluation.buffers",
                        f"{', '.join(f'`{m}`' for m in models)}: buffers (BatchNorm "
                        "statistics) broadcast from rank 0 after the training loop: an "
                        "evaluation after it (left whole) evaluates on every rank the model "
                        "rank 0 saves, and what is decided on its metric agrees")


_BUFFERED = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "register_buffer")
_LIBRARY_MODELS = ("torchvision.models.", "timm.", "transformers.")


WHOLE = Transform("eval-buffers", same_buffers_for_whole,
                  lambda ctx: not ctx.options.eval_shard and ctx.target.name == "ddp")


def _shard(ctx: Context, call: cst.Call, loops: list[cst.For]) -> bool:
    """Shard the eval loader `call` if every loop over it sums its metrics; else False."""
    facts, plan = ctx.facts, ctx.plan
    if keyword(call, "sampler") or keyword(call, "batch_sampler") or len(positional(call)) > 3:
        return False
    pos = positional(call)
    ds_arg = keyword(call, "dataset") or (pos[0] if pos else None)
    dataset = dotted(ds_arg.value) if ds_arg is not None else None
    if dataset is None or not loops:
        return False
    plans = []
    for loop in loops:
        sums = sums_before(facts, loop)
        if not sums:
            return False
        plans.append((loop, sums))
    n = ctx.names
    sampler = f"range({n.rank}, len({dataset}), {n.world_size})"

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args = [a for a in node.args if not (a.keyword and a.keyword.value == "shuffle")]
        return node.with_changes(args=with_commas([*args, keyword_arg(
            "sampler", expression(sampler))]))

    plan.rewrite(call, rewrite)
    plan.change(call, "evaluation.shard", f"evaluation sharded: `sampler={sampler}` (no padding: "
                "every sample counted once)")
    for loop, sums in plans:
        _all_reduce_after(ctx, loop, sums)
        _same_buffers_before(ctx, loop)
        for inner in facts.calls_in(loop.body):
            if _holds_ddp(ctx, inner.func):  # a function given the DDP object evaluates
                plan.rewrite(inner.func, lambda f: expression(
                    ctx.target.unwrap(ctx, code_of(f))))
        plan.change(loop, "evaluation.all_reduce",
                    f"sums {', '.join(sums)} all-reduced after the loop; the "
                    "forward calls the model itself, not its DDP object (ranks may run "
                    "different batch counts)")
    return True


def _holds_ddp(ctx: Context, func: cst.BaseExpression) -> bool:
    owner = ctx.facts.function(func)
    return isinstance(func, cst.Name) and owner is not None and ctx.holds_wrapper(
        owner, func.value)


def sums_before(facts: Facts, loop: cst.For, tensors: bool = False) -> list[str]:
    """Names set to a number before `loop` (in its function) and `+=`-ed inside it; with
    `tensors`, also set to a tensor of one number (`torch.zeros(())`, `torch.tensor(0.)`)."""
    added = []
    for node in walk(loop.body):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
            name = dotted(node.target)
            if name and "." not in name and name not in added:
                added.append(name)
    scope = facts.scope(loop)
    start = facts.line(loop)
    numbers = set()
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or facts.scope(assign) is not scope or \
                facts.line(assign) >= start or facts.module_of(assign) is not \
                facts.module_of(loop):
            continue
        for target in assign.targets:
            pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [
                (target.target, assign.value)]
            if isinstance(target.target, cst.Tuple) and isinstance(assign.value, cst.Tuple) \
                    and len(target.target.elements) == len(assign.value.elements):
                pairs = [(t.value, v.value) for t, v in zip(
                    target.target.elements, assign.value.elements, strict=True)]
            numbers |= {t.value for t, v in pairs if isinstance(t, cst.Name)
                        and _starts_a_sum(facts, v, tensors)}
    return [name for name in added if name in numbers]


def _starts_a_sum(facts: Facts, value: cst.BaseExpression, tensors: bool) -> bool:
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if not tensors or not isinstance(value, cst.Call):
        return False
    name, args = facts.call_name(value), positional(value)
    if name in ("torch.tensor", "torch.as_tensor") and args:
        return isinstance(args[0].value, (cst.Integer, cst.Float))
    return name in ("torch.zeros", "torch.ones") and len(args) == 1 and (
        isinstance(args[0].value, cst.Tuple) and not args[0].value.elements
        or isinstance(args[0].value, cst.Integer) and args[0].value.value == "1")


def _all_reduce_after(ctx: Context, loop: cst.For, sums: list[str]) -> None:
    n = ctx.names
    holder = n.fresh("eval_sums")
    values = ", ".join(f"float({s})" for s in sums)
    targets = ", ".join(sums)
    reduce = ctx.target.all_reduce_sum(ctx, holder, at=loop)
    code = (f"{holder} = torch.tensor([{values}], dtype=torch.float64, device={n.device})\n"
            f"{reduce}"
            f"{targets}{',' if len(sums) == 1 else ''} = "
            f"({', '.join(f'type({s})({holder}[{i}].item())' for i, s in enumerate(sums))}"
            f"{',' if len(sums) == 1 else ''})\n")
    ctx.plan.insert_after(in_with(ctx.facts, loop) or loop, statements(code))


def _same_buffers_before(ctx: Context, loop: cst.For, before: str = "the sharded "
                         "evaluation: every shard is evaluated with the model rank 0 "
                         "saves") -> None:
    """The sharded forward bypasses the wrapper, which would broadcast rank 0's buffers:
    each rank would evaluate with its own BatchNorm statistics. Rank 0's go to all first,
    so the shards evaluate one model, the one rank 0 saves."""
    facts, n = ctx.facts, ctx.names
    evaluations = {id(c) for m in ctx.models for c in m.other_calls}
    model = next((c.func for c in facts.calls_in(loop.body) if id(c) in evaluations), None)
    if model is None:
        return
    code = ctx.target.unwrap(ctx, facts.code(model)) if _holds_ddp(ctx, model) \
        else facts.code(model)
    buffer = n.fresh("buffer")
    ctx.need("dist", at=loop)
    ctx.plan.insert_before(in_with(facts, loop) or loop, statements(
        f"if {n.dist}.is_initialized():  # rank 0's BatchNorm statistics: one model evaluated\n"
        f"    for {buffer} in {code}.buffers():\n"
        f"        {n.dist}.broadcast({buffer}, 0)\n"), lead=True)
    ctx.plan.change(loop, "evaluation.buffers",
                    f"`{code}`'s buffers (BatchNorm statistics) broadcast from "
                    f"rank 0 before {before}")


def in_with(facts: Facts, loop: cst.For) -> cst.With | None:
    """`with torch.no_grad(): for ...` (the loop alone in it): reduce after the with."""
    block = facts.parent.get(loop)
    parent = facts.parent.get(block) if block is not None else None
    if isinstance(parent, cst.With) and isinstance(block, cst.IndentedBlock) and len(
            block.body) == 1:
        return parent
    return None

