"""What moves from the script's code into ds_config.json (`--to deepspeed`): the
gradient clipping (its call removed), the accumulation count of a script that steps
under a condition, the per-process batch; then the config itself, written beside the
output, and the lines that tell the script where to find it ($DS_CONFIG).
"""

from __future__ import annotations

import json
from pathlib import PurePath

import libcst as cst

from distrun.convert.analysis import keyword, positional, walk
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.models import Model
from distrun.convert.targets import deepspeed_config, deepspeed_merge
from distrun.convert.targets.base import is_model_optimizer
from distrun.convert.targets.deepspeed_user import UserConfig

CLIP_NORM = frozenset({"torch.nn.utils.clip_grad_norm_",
                       "torch.nn.utils.clip_grad.clip_grad_norm_"})


def clipping(ctx: Context) -> tuple[float, str, cst.Call | None]:
    """The max_norm of the script's clip_grad_norm_ (its statement removed), or 0.0."""
    facts, plan = ctx.facts, ctx.plan
    found: tuple[float, str, cst.Call | None] = (0.0, "no clip_grad_norm_ in the script", None)
    for call in facts.calls:
        if facts.call_name(call) not in CLIP_NORM:
            continue
        args = positional(call)
        norm = keyword(call, "max_norm") or (args[1] if len(args) > 1 else None)
        kind = keyword(call, "norm_type") or (args[2] if len(args) > 2 else None)
        value = deepspeed_config.constant(facts, norm.value) if norm is not None else None
        parent = facts.parent.get(call)
        if value is None or kind is not None and facts.code(kind.value) not in ("2", "2.0"):
            ctx.refuse(call, "deepspeed.clipping",
                       "this clipping cannot move into ds_config.json: its max_norm is "
                       "not a constant, or its norm is not 2", "clip by a fixed 2-norm, or "
                       "--to ddp")
            continue
        if not isinstance(parent, cst.Expr):
            ctx.refuse(call, "deepspeed.clipping",
                       "the gradient norm clip_grad_norm_ returns is used: under "
                       "DeepSpeed the engine clips", "use `engine.get_global_grad_norm()` "
                       "after `engine.step()` instead, then convert again")
            continue
        if found[2] is not None and found[0] != value.number:
            ctx.refuse(call, "deepspeed.clipping",
                       "two clip_grad_norm_ calls with different max_norm",
                       "use one max_norm")
        plan.remove(parent)
        plan.change(call, "deepspeed.clipping",
                    f"`{facts.code(call.func)}(...)` removed: the engine "
                    f"clips at max_norm {value.number:g} (gradient_clipping in "
                    f"{deepspeed_config.FILENAME})")
        found = (value.number, value.how, call)
    return found


def accumulation(ctx: Context, steps: list[cst.Call]) -> int:
    """Gradient accumulation: the script steps under its own condition, so DeepSpeed is
    told not to count micro-steps (`managed_gradient_accumulation: false`: every
    `engine.step()` is a boundary). The count, for DeepSpeed's batch arithmetic, is the
    `% N` of the condition. 0 when the script does not accumulate."""
    if not steps:
        return 0
    facts, plan = ctx.facts, ctx.plan
    tests = [node.test for c in steps for node in facts.ancestors(c) if isinstance(node, cst.If)]
    counts = {int(v.number) for t in tests for node in walk(t)
              if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)
              and (v := deepspeed_config.constant(facts, node.right)) is not None}
    count = counts.pop() if len(counts) == 1 else 1
    plan.change(steps[0], "deepspeed.grad_accum",
                "the optimizer steps under the script's condition: "
                "managed_gradient_accumulation false, so each engine.step() is an optimizer "
                f"step; gradient_accumulation_steps {count}" + (
                    " (the condition's modulus)" if count > 1 else
                    " (no single `% N` in the condition: DeepSpeed's throughput logs count "
                    "one micro-batch per step)"))
    inside = {c for node in facts.ancestors(steps[0]) if isinstance(node, cst.If)
              for c in facts.calls_in(node)}
    if ctx.options.zero >= 2:  # measured: ZeRO-1 drops them, ZeRO-2 and 3 do not
        for call in facts.calls:
            if method_name(call) == "zero_grad" and is_model_optimizer(ctx, call) \
                    and call not in inside:
                plan.finding(call, "deepspeed.grad_accum", f"under ZeRO-{ctx.options.zero} this "
                             "zero_grad() cannot drop the gradients of micro-batches that have "
                             "not stepped yet (ZeRO keeps them in its own buffers): if an "
                             "epoch's batches per rank "
                             "are not a multiple of the accumulation count, the left-over "
                             "ones go into the next step, where the original drops them",
                             "convert with --zero 1, or make every epoch's batch count a "
                             "multiple of the accumulation count")
    return count


def write_config(ctx: Context, model: Model, user: UserConfig,
                 clipping: tuple[float, str, cst.Call | None], accumulation: int,
                 steps: list[cst.Call]) -> None:
    facts, plan = ctx.facts, ctx.plan
    loader = ctx.train_loaders[0] if ctx.train_loaders else None
    micro = deepspeed_config.micro_batch(facts, loader)
    if micro is None:
        plan.finding(loader, "deepspeed.micro_batch",
                     "the training batch size cannot be read from the "
                     f"script: train_micro_batch_size_per_gpu is 1 in {user.name}",
                     "set it to the per-process batch size (DeepSpeed uses it in its "
                     "throughput logs; the DataLoader still decides the batch)")
    else:
        plan.change(loader or model.optimizer, "deepspeed.micro_batch",
                    "train_micro_batch_size_per_gpu "
                    f"{int(micro.number)} ({micro.how})")
    optimizer_name = facts.call_name(model.optimizer) if isinstance(model.optimizer, cst.Call) \
        else None
    untested = optimizer_name not in deepspeed_config.ZERO_TESTED
    if untested:
        plan.change(model.optimizer, "deepspeed.untested_optimizer",
                    f"zero_allow_untested_optimizer: "
                    f"`{optimizer_name}` is not one DeepSpeed tests under ZeRO (it runs it, "
                    "element-wise on each shard)")
    clip, how, where = clipping
    plan.change(where or model.optimizer, "deepspeed.clipping",
                f"gradient_clipping {clip:g} ({how}; "
                "written out because DeepSpeed 0.19.8 otherwise clips at 1.0)")
    found = deepspeed_merge.Found(micro, clipping, str(optimizer_name) if untested else None,
                                  accumulation, loader, steps[0] if steps else None)
    ctx.files[user.name] = deepspeed_merge.write(ctx, user, model, found)
    if user.source is not None:
        ctx.file_bases[user.name] = str(user.source)
    n = ctx.names
    name = json.dumps(user.name)
    beside = name if facts.entry.path.endswith(".ipynb") or PurePath(user.name).is_absolute() \
        else f'{n.os}.path.join({n.os}.path.dirname({n.os}.path.abspath(__file__)), {name})'
    ctx.setup_lines.append(
        f'{n.os}.environ.setdefault("LOCAL_RANK", str({n.local_rank}))  # deepspeed.initialize '
        'reads it\n'
        f"# DeepSpeed's settings (ZeRO stage, batch, clipping): $DS_CONFIG, else "
        f"{user.name} beside this script\n"
        f'{n.os}.environ.setdefault("DS_CONFIG", {beside})\n')
