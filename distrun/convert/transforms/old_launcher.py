"""Scripts distributed for the old launcher: completed for torchrun, not rewritten.

A script written for `python -m torch.distributed.launch` reads its local rank from a
`--local_rank` argument; torchrun passes none (and torch 2's launcher passes
`--local-rank`), so the script runs undistributed on every process, `args.local_rank`
left at -1: N full trainings, exit 0. Its distributed code is right; what is missing:

  parser.add_argument("--local_rank", type=int, default=-1)
      ->  parser.add_argument("--local_rank", "--local-rank", type=int,
                              default=int(os.environ.get("LOCAL_RANK", -1)))
  apex amp / apex DDP (gone from apex)  ->  torch.amp / torch's DistributedDataParallel

Everything else is left as the author wrote it; missing sharding or reshuffling is
reported.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, keyword, positional, string_value
from distrun.convert.build import append_keyword, code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import DATALOADER, train_loops
from distrun.convert.models import find_models
from distrun.convert.object_flow import Place
from distrun.convert.transforms.apex import migrate_apex
from distrun.convert.transforms.device_aware import (
    group_for_the_launcher,
    make_device_aware,
    place_names,
)
from distrun.convert.transforms.epochs import place_set_epoch

FLAGS = ("--local_rank", "--local-rank")
_APEX_DDP = "apex.parallel.DistributedDataParallel"
_SAMPLERS = ("torch.utils.data.distributed.DistributedSampler",
             "torch.utils.data.DistributedSampler")


def local_rank_option(facts: Facts) -> cst.Call | None:
    """`parser.add_argument("--local_rank", ...)`, when nothing reads LOCAL_RANK from the
    environment: the mark of a script written for torch.distributed.launch."""
    if any(s.evaluated_value == "LOCAL_RANK" for s in facts.strings):
        return None
    for call in facts.calls:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "add_argument" and any(
                string_value(a.value) in FLAGS for a in positional(call)):
            return call
    return None


def plan_completion(ctx: Context) -> None:
    facts = ctx.facts
    option = local_rank_option(facts)
    assert option is not None
    _local_rank_from_environment(ctx, option)
    without_apex(ctx)
    sources = [p for node in facts.attributes if node.attr.value == "local_rank"
               and (p := ctx.flow.place_of(node)) is not None]
    for_the_launcher(ctx, sources, rank=False)


def for_the_launcher(ctx: Context, device_sources: list[Place], rank: bool) -> None:
    """What every completion ends with: the devices made CPU-proof (from what names the
    local device), the group set up whenever the launcher started several processes,
    the names the rewrites read (RANK and WORLD_SIZE with `rank`), what is missing."""
    device = make_device_aware(ctx, device_sources)
    group_for_the_launcher(ctx)
    place_names(ctx, rank=rank, device=device)
    report_gaps(ctx)


COMPLETE = Transform("complete", plan_completion)


def without_apex(ctx: Context) -> None:
    """apex amp and apex's DistributedDataParallel (both gone from apex) -> torch's."""
    facts = ctx.facts
    ctx.models = find_models(facts, ctx.flow)  # where the forward passes are, for autocast
    migrate_apex(ctx)
    for call in facts.calls:
        if facts.call_name(call) == _APEX_DDP and positional(call):
            _torch_ddp(ctx, call)


def _local_rank_from_environment(ctx: Context, option: cst.Call) -> None:
    flags = [string_value(a.value) for a in positional(option)]
    missing = [f for f in FLAGS if f not in flags]
    given = keyword(option, "default")
    old = ctx.facts.code(given.value) if given is not None else "-1"
    default = f'int({ctx.names.os}.environ.get("LOCAL_RANK", {old}))'

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args = list(node.args)
        last_flag = max(i for i, a in enumerate(args)
                        if a.keyword is None and string_value(a.value) in FLAGS)
        for flag in missing:
            args.insert(last_flag + 1, cst.Arg(cst.SimpleString(f'"{flag}"'), comma=cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" "))))
        node = node.with_changes(args=args)
        if given is None:
            return append_keyword(node, "default", expression(default))
        return node.with_changes(args=[
            a.with_changes(value=expression(default))
            if a.keyword is not None and a.keyword.value == "default" else a for a in node.args])

    ctx.plan.rewrite(option, rewrite)
    also = f", and `{missing[0]}` is accepted too" if missing else ""
    ctx.plan.change(option, "old_launcher.local_rank",
                    f"the local rank now defaults to LOCAL_RANK from the "
                    f"environment: torchrun passes no `--local_rank` (torch 2's "
                    f"torch.distributed.launch passes `--local-rank`){also}; without it every "
                    "process trained alone")


def _torch_ddp(ctx: Context, call: cst.Call) -> None:
    n = ctx.names
    model = code_of(positional(call)[0].value)
    local = f'int({n.os}.environ.get("LOCAL_RANK", 0))'
    new = (f"torch.nn.parallel.DistributedDataParallel({model}, device_ids=[{local}] if "
           "torch.cuda.is_available() else None)")
    ctx.plan.rewrite(call, lambda _n: expression(new))
    ctx.need("torch", at=call)
    ctx.plan.change(call, "old_launcher.apex_ddp",
                    "apex's DistributedDataParallel (removed from apex) -> "
                    "torch's")


def report_gaps(ctx: Context) -> None:
    facts = ctx.facts
    samplers = [c for c in facts.calls if facts.call_name(c) in _SAMPLERS]
    loaders = [c for c in facts.calls if facts.call_name(c) in DATALOADER]
    if not samplers and not loaders:
        return  # no DataLoader (data made by hand): nothing a sampler could shard
    if not samplers:
        ctx.plan.finding(loaders[0], "old_launcher.no_sampler",
                         "no DistributedSampler: every rank reads the whole "
                         "training set", "give the training DataLoader "
                         "`sampler=DistributedSampler(dataset, shuffle=True)`")
    elif not any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "set_epoch"
                 for c in facts.calls):
        placed: set[tuple[int, str]] = set()
        for loop in train_loops(facts, ctx.flow):
            place_set_epoch(ctx, loop.loop, loop.loader, facts.scope(loop.loop), 0, placed)
        if not placed:
            ctx.plan.finding(samplers[0], "old_launcher.no_set_epoch",
                             "the DistributedSampler never gets "
                             "`set_epoch(epoch)`: every epoch replays the same order",
                             "call `loader.sampler.set_epoch(epoch)` at the start of each "
                             "epoch")
