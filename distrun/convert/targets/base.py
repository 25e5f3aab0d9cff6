"""What a target is: the vocabulary the transforms ask for instead of branching on it.

A conversion writes a script for one target: plain torch DistributedDataParallel,
Hugging Face accelerate, DeepSpeed or FSDP2. The transforms are the same for all of
them (shard the data, print on rank 0, save on rank 0 then wait, set up and tear down);
what differs is said here, once per target, as answers to the questions below: how the
model is wrapped and how the module inside is reached, how ranks wait for each other
and sum a value, how a training loader is sharded and reshuffled, what the set-up and
tear-down code is, who owns mixed precision, which options it refuses and why, and
which rewrites of its own it adds to the pipeline (at which stage).

`TorchDistributed` answers with torch.distributed's words (a process group started
by the script); DDP, DeepSpeed and FSDP2 build on it. Accelerate answers with the
Accelerator's. Shared refusals and rewrites are the functions at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst

from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, Setup, Stage, Transform, Wrapping, WrapSite
from distrun.convert.layers import MODULE_CLASSES
from distrun.convert.models import Model
from distrun.convert.options import ConvertOptions
from distrun.convert.options import Target as TargetName


class TorchDistributed:
    """The answers of torch.distributed: a process group the script starts itself, a
    DistributedSampler per training loader. Subclasses say how the model is wrapped."""

    name: TargetName = "ddp"
    wrapper = "DistributedDataParallel object"
    wrap_call = "the DDP wrap"
    launcher = "torchrun"
    wraps_model = True
    adds_autocast = True
    loaders_count_epochs = False

    def check_options(self, options: ConvertOptions, given: Mapping[str, Any]) -> None:
        if given.get("shard") is not None:
            raise ValueError("--shard only applies to --to fsdp")

    def transforms(self, stage: Stage) -> tuple[Transform, ...]:
        return ()

    def precision_owner(self, options: ConvertOptions) -> str | None:
        return None

    def wrapped_name(self, model_name: str) -> str:
        return f"ddp_{model_name}"

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping | None:
        raise NotImplementedError

    def unwrap(self, ctx: Context, code: str) -> str:
        return f"{code}.module"

    def barrier(self, ctx: Context, at: cst.CSTNode | None = None) -> str:
        """`dist.barrier()`; in a module other than the entry, `barrier_if_initialized()`
        (defined there): such a module is also imported by scripts started without a
        launcher and without a process group (another entry point of the project, a
        notebook, a test), where there is no other rank to wait for."""
        ctx.need("dist", at=at)
        n = ctx.names
        if at is None or ctx.facts.module_of(at).is_entry:
            return f"{n.dist}.barrier()"
        ctx.define_helper("barrier", at, _BARRIER.format(name=n.barrier, dist=n.dist))
        return f"{n.barrier}()"

    def all_reduce_sum(self, ctx: Context, holder: str, at: cst.CSTNode) -> str:
        ctx.need("torch", "dist", at=at)
        return f"{ctx.names.dist}.all_reduce({holder})\n"

    def gather_objects(self, ctx: Context, holder: str, value: str, at: cst.CSTNode) -> str:
        """`holder`: the list of every rank's `value` (any picklable object), by rank."""
        ctx.need("dist", at=at)
        n = ctx.names
        return (f"{holder} = [None] * {n.world_size}\n"
                f"{n.dist}.all_gather_object({holder}, {value})\n")

    def no_sync(self, ctx: Context, wrapper: str) -> str:
        return f"{wrapper}.no_sync()"

    def set_epoch(self, loader: str, epoch: str) -> str:
        return f"{loader}.sampler.set_epoch({epoch})"

    def take_loader(self, ctx: Context, call: cst.Call, why: str) -> bool:
        return False

    def prepare_loader(self, ctx: Context, name: str) -> str | None:
        return None

    def main_process_first(self, ctx: Context) -> str | None:
        return None

    def setup(self, ctx: Context) -> Setup:
        """The process group of torchrun's variables: NCCL and the local rank's GPU where
        CUDA is available, gloo and the CPU otherwise; gloo and the CPU wherever it runs
        for a script that trains on the CPU (`Context.on_cpu`)."""
        n = ctx.names
        if ctx.on_cpu:
            device = 'torch.device("cpu")  # the script trains on the CPU: so does every rank'
            group = f'''if "RANK" in {n.os}.environ:
    {n.dist}.init_process_group("gloo")
else:  # started without a launcher: a world of one process
    {n.dist}.init_process_group("gloo", store={n.dist}.HashStore(), rank=0, world_size=1)
'''
            comment = "processes on the CPU, as the script trains"
            message = "gloo, every rank on the CPU (the script trains on the CPU)"
        else:
            device = (f'torch.device("cuda", {n.local_rank}) if torch.cuda.is_available() '
                      'else torch.device("cpu")')
            group = f'''if torch.cuda.is_available():
    torch.cuda.set_device({n.local_rank})
if "RANK" in {n.os}.environ:
    {n.dist}.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
else:  # started without a launcher: a world of one process
    {n.dist}.init_process_group(
        "nccl" if torch.cuda.is_available() else "gloo",
        store={n.dist}.HashStore(), rank=0, world_size=1,
    )
'''
            comment = "one process per device"
            message = ("nccl with the local rank's GPU when CUDA is available, gloo on CPU "
                       "otherwise")
        place = f'''{n.local_rank} = int({n.os}.environ.get("LOCAL_RANK", 0))
{n.rank} = int({n.os}.environ.get("RANK", 0))
{n.world_size} = int({n.os}.environ.get("WORLD_SIZE", 1))
{n.device} = {device}
'''
        # Collect garbage first: DDP's last gradient all-reduces can sit in reference
        # cycles; freed after the group is gone, gloo aborts the process ("terminate
        # called without an active exception", seen on loaded machines).
        teardown = (f"{n.gc}.collect()  # free DDP's finished communication first\n"
                    f"{n.dist}.destroy_process_group()\n")
        return Setup(
            module_level=place, start=group,
            comment=f"# distrun: {comment}; torchrun sets LOCAL_RANK, RANK and WORLD_SIZE.",
            start_comment="# distrun: the process group, for a run (importing this file "
                          "starts none)",
            imports=("gc", "torch", "dist", "os"), teardown=teardown,
            message="process group set up {where}: " + message)

    def module_lines(self, ctx: Context, used: set[str]) -> tuple[str, set[str]]:
        return "", set()


def one_model_one_optimizer(ctx: Context, what: str, fix: str, by_hand: str) -> Model | None:
    """The single model trained by an optimizer, or None with the conversion refused:
    `what` needs one model trained by one torch optimizer (`fix` for several models,
    `by_hand` says why a model updated without an optimizer cannot be converted)."""
    if len(ctx.models) != 1:
        where = ctx.models[1].optimizer if len(ctx.models) > 1 else None
        ctx.refuse(where, f"{ctx.target.name}.one_model",
                   f"{what} needs one model trained by one optimizer: "
                   f"{len(ctx.models)} found", fix)
        return None
    model = ctx.models[0]
    if isinstance(model.optimizer, cst.For):
        ctx.refuse(model.optimizer, f"{ctx.target.name}.updated_by_hand",
                   f"this model is updated by hand, without an optimizer: "
                   f"{by_hand}", "use a torch.optim optimizer, or --to ddp")
        return None
    return model


def backward_through(ctx: Context, call: cst.Call, owner: str, extra: str = "") -> None:
    """`loss.backward(args)` -> `owner.backward(loss, args<extra>)`: the accelerator or
    the engine runs the backward pass (and scales the loss when it must)."""
    assert isinstance(call.func, cst.Attribute)

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        rest = "".join(", " + code_of(a).rstrip(", ") for a in node.args)
        return expression(f"{owner}.backward({code_of(node.func.value)}{rest}{extra})")

    ctx.plan.rewrite(call, rewrite)


def is_model_optimizer(ctx: Context, call: cst.Call) -> bool:
    """Is `call` a method of the model's optimizer, wherever it went (`optimizer`,
    `self.optimizer`, a function's parameter)?"""
    optimizer = ctx.models[0].optimizer if len(ctx.models) == 1 else None
    built = ctx.facts.parent.get(optimizer) if optimizer is not None else None
    if not (isinstance(call.func, cst.Attribute) and isinstance(built, cst.Assign)
            and len(built.targets) == 1):
        return False
    flow = ctx.flow
    place = flow.place_of(flow.strip(call.func.value))
    return place is not None and flow.same(place, flow.place_of(built.targets[0].target))


def in_module_class(ctx: Context, anchor: cst.CSTNode) -> bool:
    """Whether `anchor` is in a method of a class of the script that is an nn.Module (its
    bases followed through the script's own classes)."""
    cls = next((a for a in ctx.facts.ancestors(anchor) if isinstance(a, cst.ClassDef)), None)
    seen: set[int] = set()
    while cls is not None and id(cls) not in seen:
        seen.add(id(cls))
        if any(ctx.facts.qualname(b.value) in MODULE_CLASSES for b in cls.bases):
            return True
        cls = ctx.flow.base_class(cls)
    return False


_BARRIER = '''

def {name}():
    """distrun: every rank waits here for the others; nothing to wait for in a process
    started without a launcher (no process group: a script importing this module)."""
    if {dist}.is_initialized():
        {dist}.barrier()
'''
