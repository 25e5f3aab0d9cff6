"""Hugging Face accelerate (`--to accelerate`): an `Accelerator` does the distributed work.

    (set-up)                        ->  accelerator = Accelerator(cpu=not torch.cuda...)
                                        LOCAL_RANK = accelerator.local_process_index ...
    model = Net()                   ->  model = Net()
    optimizer = SGD(...)                optimizer = SGD(...)
    (the wrap)                          ddp_model, optimizer, train_loader =
                                            accelerator.prepare(model, optimizer, train_loader)
    train_loader = DataLoader(...)  ->  train_loader = accelerator.prepare(DataLoader(...))
                                        (loaders built before the optimizer, in its scope,
                                         are prepared with the model and the optimizer)
    loss.backward()                 ->  accelerator.backward(loss)   (it scales the loss
                                                                    when mixed precision
                                                                    needs it)

Ranks wait with `accelerator.wait_for_everyone()`, sum with `accelerator.reduce`, skip
the all-reduce with `accelerator.no_sync(model)`; rank 0 downloads first inside
`accelerator.main_process_first()`. `--amp` is the Accelerator's `mixed_precision`
(none under `--amp keep`: `accelerate launch --mixed_precision` decides).

Won't: rewrite `scaler.scale(loss).backward()` or apex's scaled loss (left as they are).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import code_of, expression, statement
from distrun.convert.context import Context, Setup, Stage, Transform, Wrapping, WrapSite
from distrun.convert.idioms import is_backward
from distrun.convert.options import ConvertOptions
from distrun.convert.options import Target as TargetName
from distrun.convert.targets.base import backward_through, in_module_class


@dataclass(frozen=True)
class LoaderToPrepare:
    """A training DataLoader that `accelerator.prepare` must take."""

    call: cst.Call  # the DataLoader(...) call
    name: str | None  # what it is assigned to, if a plain target
    why: str  # why it counts as a training loader


class Accelerate:
    name: TargetName = "accelerate"
    wrapper = "accelerate's DDP object"
    wrap_call = "`accelerator.prepare`"
    launcher = "accelerate"
    wraps_model = True
    adds_autocast = False  # --amp is the Accelerator's mixed_precision
    loaders_count_epochs = True  # prepared loaders reshuffle each pass themselves

    def __init__(self) -> None:
        self.loaders: list[LoaderToPrepare] = []  # data -> the wrap, then `prepared`
        self.prepared: set[cst.Call] = set()  # optimizers prepared with their model

    def check_options(self, options: ConvertOptions, given: Mapping[str, Any]) -> None:
        pass

    def transforms(self, stage: Stage) -> tuple[Transform, ...]:
        if stage == "prepared":
            return (Transform("accelerate-loaders", self._prepare_remaining_loaders),)
        if stage == "engine":  # --amp none: no scaling is needed without mixed precision
            return (Transform("accelerate-backward", _backward_through_accelerator,
                              lambda ctx: ctx.options.amp != "none"),)
        return ()

    def precision_owner(self, options: ConvertOptions) -> str | None:
        if options.amp in ("fp16", "bf16"):  # the script's own would scale the loss twice
            return f"--amp {options.amp}: the Accelerator's mixed_precision sets it"
        return None

    def wrapped_name(self, model_name: str) -> str:
        return f"ddp_{model_name}"

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping:
        """`ddp_model, optimizer, loader = accelerator.prepare(model, optimizer, loader)`
        when the optimizer and the loaders were built before, in the same function
        (prepared together after the model exists, the loaders draw from the random
        generator where the original script does not: its model starts from the same
        weights); else the model alone here, and the optimizer where it is built."""
        facts, plan, acc = ctx.facts, ctx.plan, ctx.names.accelerator
        model, target, name = site.model, site.wrapper, site.model_code
        anchor, after = site.anchor, site.after
        attribute = target.removeprefix("self.")
        if attribute != target and attribute.isidentifier() and in_module_class(ctx, anchor):
            # not a submodule of the script's nn.Module: its checkpoint keeps its keys
            target = f'self.__dict__["{attribute}"]'

        alone = Wrapping(statement(f"{target} = {acc}.prepare({name})\n"), anchor, after)
        if not isinstance(model.optimizer, cst.Call):  # updated by hand: nothing to prepare
            return alone
        built = facts.statement(model.optimizer)
        small = built.body[0] if isinstance(built, cst.SimpleStatementLine) else None
        optimizer = None
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            optimizer = dotted(small.targets[0].target)
        if optimizer is None or model.optimizer in self.prepared:
            return alone
        self.prepared.add(model.optimizer)
        assert built is not None
        together = facts.scope(built) is facts.scope(anchor) and (
            facts.line(built) < facts.line(anchor) or after and facts.line(built) <= facts.line(
                anchor))
        at = anchor if together else built
        loaders = [entry for entry in self.loaders if entry.name
                   and facts.scope(entry.call) is facts.scope(at)
                   and facts.line(entry.call) < facts.line(at)]
        for entry in loaders:
            self.loaders.remove(entry)
        others = [optimizer, *[entry.name for entry in loaders if entry.name]]
        sharded = ": the loaders are sharded, each process reads its own batches" \
            if loaders else ""
        where = "with the model" if together else "after the optimizer is built"
        plan.change(at, "accelerate.prepare", f"{', '.join(f'`{o}`' for o in others)} prepared by "
                    f"accelerate {where}{sharded}")
        if loaders:
            plan.shards_batches(at)
        if not together:
            joined = ", ".join(others)
            plan.insert_after(built, [statement(f"{joined} = {acc}.prepare({joined})\n")])
            return alone
        targets, sources = ", ".join([target, *others]), ", ".join([name, *others])
        return Wrapping(statement(f"{targets} = {acc}.prepare({sources})\n"), anchor, after)

    def unwrap(self, ctx: Context, code: str) -> str:
        return f"{ctx.names.accelerator}.unwrap_model({code})"

    def barrier(self, ctx: Context, at: cst.CSTNode | None = None) -> str:
        return f"{ctx.names.accelerator}.wait_for_everyone()"

    def all_reduce_sum(self, ctx: Context, holder: str, at: cst.CSTNode) -> str:
        ctx.need("torch", at=at)
        return f"{holder} = {ctx.names.accelerator}.reduce({holder}, reduction=\"sum\")\n"

    def gather_objects(self, ctx: Context, holder: str, value: str, at: cst.CSTNode) -> str:
        ctx.need("torch", at=at)
        a = ctx.names.accelerator
        return (f"{holder} = [{value}]\n"
                f"if {a}.num_processes > 1:\n"
                f"    {holder} = [None] * {a}.num_processes\n"
                f"    torch.distributed.all_gather_object({holder}, {value})\n")

    def no_sync(self, ctx: Context, wrapper: str) -> str:
        return f"{ctx.names.accelerator}.no_sync({wrapper})"

    def set_epoch(self, loader: str, epoch: str) -> str:
        return f"{loader}.set_epoch({epoch})"

    def take_loader(self, ctx: Context, call: cst.Call, why: str) -> bool:
        """Kept for `prepare`: with the model's, or on its own after the model's."""
        parent = ctx.facts.parent.get(call)
        name = None
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            name = dotted(parent.targets[0].target)
        self.loaders.append(LoaderToPrepare(call, name, why))
        return True

    def prepare_loader(self, ctx: Context, name: str) -> str | None:
        return f"{ctx.names.accelerator}.prepare({name})"

    def main_process_first(self, ctx: Context) -> str | None:
        return f"{ctx.names.accelerator}.main_process_first()"

    def setup(self, ctx: Context) -> Setup:
        n = ctx.names
        mixed = {"fp16": '"fp16" if torch.cuda.is_available() else "no"',
                 "bf16": '"bf16"', "none": '"no"'}.get(ctx.options.amp)
        # cpu=True without CUDA: otherwise accelerate sees no distributed run on CPU.
        # No mixed_precision under --amp keep: `accelerate launch --mixed_precision`
        # (ACCELERATE_MIXED_PRECISION) decides, as in a script written for accelerate.
        chosen = f" mixed_precision={mixed}," if mixed else ""
        start = f'''{n.accelerator} = Accelerator(
    cpu=not torch.cuda.is_available(),{chosen}
)
{n.local_rank} = {n.accelerator}.local_process_index
{n.rank} = {n.accelerator}.process_index
{n.world_size} = {n.accelerator}.num_processes
{n.device} = {n.accelerator}.device
'''
        # accelerate starts no process group for a single process
        teardown = (f"{n.gc}.collect()  # free DDP's finished communication first\n"
                    f"if {n.dist}.is_initialized():\n"
                    f"    {n.dist}.destroy_process_group()\n")
        return Setup(
            module_level="", start=start,
            comment="# distrun: one process per device; accelerate knows which one this is.",
            start_comment="", imports=("gc", "torch", "dist", "accelerator"),
            teardown=teardown,
            message="`Accelerator()` created {where}: it sets up the processes and the device")

    def module_lines(self, ctx: Context, used: set[str]) -> tuple[str, set[str]]:
        n = ctx.names
        if n.accelerator not in used:
            return "", set()
        mixed = {"fp16": '"fp16" if torch.cuda.is_available() else "no"',
                 "bf16": '"bf16"'}.get(ctx.options.amp, '"no"')
        return (f"{n.accelerator} = Accelerator(\n    cpu=not torch.cuda.is_available(), "
                f"mixed_precision={mixed},\n)\n", {"accelerator"})

    def _prepare_remaining_loaders(self, ctx: Context) -> None:
        acc = ctx.names.accelerator
        for loader in self.loaders:
            kept = _prepare_apart(ctx, loader.call)
            if not kept:
                ctx.plan.rewrite(loader.call,
                                 lambda n: expression(f"{acc}.prepare({code_of(n)})"))
            ctx.plan.change(loader.call, "accelerate.prepare_loader",
                            f"DataLoader prepared by accelerate "
                            f"({loader.why}): each process reads its own batches, shuffled "
                            f"alike; the global batch is batch_size x WORLD_SIZE{kept}")
            ctx.plan.shards_batches(loader.call)


def _prepare_apart(ctx: Context, call: cst.Call) -> str:
    """`loader = DataLoader(...)` stays; under it, `loader = accelerator.prepare(loader)`
    inside `torch.random.fork_rng`. accelerate's prepare seeds the loader's sampler from
    torch's global generator (without a seedable sampler), a draw the original script
    never makes: a model built after it would start from other weights than the
    original's. "" when the loader is not assigned to a name on a line of its own."""
    line = ctx.facts.statement(call)
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(
        line.body) == 1 else None
    if line is None or not isinstance(small, cst.Assign) or small.value is not call or len(
            small.targets) != 1:
        return ""
    name = dotted(small.targets[0].target)
    if name is None:
        return ""
    ctx.need("torch", at=call)
    ctx.plan.insert_after(line, [statement(
        f"with torch.random.fork_rng(devices=[]):\n"
        f"    {name} = {ctx.names.accelerator}.prepare({name})\n")])
    return (", prepared on the next line inside `torch.random.fork_rng` (accelerate draws "
            "the sampler's seed from torch's generator, which the original never does: a "
            "model built after starts from the original's weights)")


def _backward_through_accelerator(ctx: Context) -> None:
    facts, acc = ctx.facts, ctx.names.accelerator
    owner = ctx.target.precision_owner(ctx.options)
    scaled = {dotted(item.asname.name) for c in facts.calls
              if facts.call_name(c) == "apex.amp.scale_loss"
              and isinstance(item := facts.parent.get(c), cst.WithItem) and item.asname}
    if scaled and owner is not None:
        ctx.refuse(next(c for c in facts.calls if facts.call_name(c) == "apex.amp.scale_loss"),
                   "accelerate.apex_amp", f"apex's scaled loss with --amp {ctx.options.amp} "
                   "(the Accelerator's mixed_precision): the loss would be scaled by "
                   "neither (apex becomes a disabled GradScaler, whose backward does not "
                   "go through the Accelerator)", "convert with --amp keep "
                   "(apex becomes torch.amp in the script), or --to ddp")
        return
    for call in facts.calls:
        if not is_backward(call):
            continue
        assert isinstance(call.func, cst.Attribute)
        loss = call.func.value
        if owner is not None and isinstance(loss, cst.Call) and isinstance(
                loss.func, cst.Attribute) and loss.func.attr.value == "scale" and loss.args:
            loss = loss.args[0].value  # the GradScaler is gone: scaler.scale(loss) is loss
        elif isinstance(loss, cst.Call) or dotted(loss) in {None, *scaled}:
            continue  # scaler.scale(loss).backward() and apex's scaled loss stay as they are
        backward_through(ctx, call, acc)
        ctx.plan.change(call, "accelerate.backward", f"`{facts.code(call.func.value)}"
                        f".backward()` -> `{acc}.backward({facts.code(loss)})`")
