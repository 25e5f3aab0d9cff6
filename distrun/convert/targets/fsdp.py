"""FSDP2 (`--to fsdp`): the model is sharded in place with `fully_shard`, before its
optimizer is built; every rank holds 1/WORLD_SIZE of the weights, gradients and
optimizer state.

    model = Net().to(device)              model = Net().to(device)
                                      ->  for tensor in [*model.parameters(), *model.buffers()]:
                                              dist.broadcast(tensor.detach(), 0)
                                          for block in reversed([m for m in model.modules()
                                                           if type(m).__name__ in ("Block",)]):
                                              fully_shard(block)
                                          fully_shard(model)
    optimizer = SGD(model.parameters())   optimizer = SGD(model.parameters())

The model stays the script's own class (FSDP2 subclasses it in place): forward passes,
attributes and methods keep working, nothing gains a `module.` prefix. Rank 0's weights
are broadcast first, as DDP does at its wrap (FSDP2 does not: each rank would keep a
shard of its own initialisation). Each repeated block (`--shard auto`: the class of a
ModuleList or Sequential built from one class, nn.TransformerEncoderLayer and
DecoderLayer; or the classes `--shard` names) is sharded on its own, children first,
then the root: forward and backward gather one block's weights at a time.
`--amp bf16` becomes a `MixedPrecisionPolicy` (bf16 compute, fp32 weights and gradient
reduction). Everything else is the DDP conversion (sharded loaders, rank-0 output, the
process group); states and clipping are converted by `fsdp_checkpoint`.

Won't (left unconverted, with the reason and the fix): several models, a model updated
by hand, `model.half()` / `.bfloat16()`, a model bound again after its optimizer is
built, an optimizer built in a loop or where the model cannot be reached, parameters
tied inside a block to something outside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import code_of, statements
from distrun.convert.context import Context, Stage, Transform, Wrapping, WrapSite
from distrun.convert.idioms import DATA_PARALLEL, MOVES, method_name
from distrun.convert.layers import built_from, sync_bn_lines
from distrun.convert.models import Model, is_moved, model_code_at
from distrun.convert.options import ConvertOptions
from distrun.convert.options import Target as TargetName
from distrun.convert.targets import fsdp_checkpoint, fsdp_memory
from distrun.convert.targets.base import TorchDistributed, one_model_one_optimizer

_LIST_OF_BLOCKS = frozenset({"torch.nn.ModuleList", "torch.nn.Sequential",
                             "torch.nn.modules.container.ModuleList",
                             "torch.nn.modules.container.Sequential"})
_TORCH_BLOCKS = {
    "torch.nn.TransformerEncoderLayer": ("TransformerEncoderLayer",),
    "torch.nn.TransformerDecoderLayer": ("TransformerDecoderLayer",),
    "torch.nn.Transformer": ("TransformerEncoderLayer", "TransformerDecoderLayer"),
}
_HALF = frozenset({"half", "bfloat16"})
# Calls that give back the model itself (apex, DataParallel: migrated or removed).
_SAME_MODEL = DATA_PARALLEL | {"apex.amp.initialize"}
_PARAMETERS = ("parameters", "named_parameters")


class FSDP(TorchDistributed):
    """FSDP2 changes the model in place: the model transform makes no wrapper, this
    target's own transform shards the model before its optimizer is built."""

    name: TargetName = "fsdp"
    wrapper = "FSDP2 sharded model"
    wrap_call = "`fully_shard`"
    wraps_model = False

    def check_options(self, options: ConvertOptions, given: Mapping[str, Any]) -> None:
        shard = options.shard.replace(" ", "")
        if shard != "auto" and not all(name.isidentifier() for name in shard.split(",")):
            raise ValueError(f"--shard takes auto or class names separated by commas, not "
                             f"{options.shard!r}")
        if options.amp == "fp16":
            raise ValueError("--amp fp16 does not apply to --to fsdp: use --amp bf16 (FSDP2's "
                             "MixedPrecisionPolicy, no loss scaling needed), keep or none")
        if options.grad_accum_no_sync:
            raise ValueError("--grad-accum-no-sync does not apply to --to fsdp (FSDP2 skips "
                             "the reduction with model.set_requires_gradient_sync(False))")
        if options.eval_shard:
            raise ValueError("--eval shard does not apply to --to fsdp: every forward pass "
                             "of a sharded model gathers weights from every rank, so each "
                             "rank evaluates the full set")

    def transforms(self, stage: Stage) -> tuple[Transform, ...]:
        return (Transform("fsdp", plan_fsdp),) if stage == "engine" else ()

    def precision_owner(self, options: ConvertOptions) -> str | None:
        return "FSDP2's MixedPrecisionPolicy sets it" if options.amp == "bf16" else None

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping | None:
        raise AssertionError("FSDP2 makes no wrapper (wraps_model is False)")


def plan_fsdp(ctx: Context) -> None:
    _refuse_what_cannot_shard(ctx)
    if ctx.refusal is not None:
        return
    model = ctx.models[0]
    site = _shard_site(ctx, model)
    if site is None:
        return
    anchor, code = site
    blocks = block_classes(ctx)
    _named_blocks_exist(ctx, model, blocks)
    _refuse_tied_blocks(ctx, blocks)
    if ctx.refusal is not None:
        return
    fsdp_checkpoint.keep_plain_copy(ctx, model, anchor, code)
    _shard(ctx, model, anchor, code, blocks)
    for call in [*model.forwards, *model.other_calls]:  # each gathers weights: a collective
        model.wrapped.calls[call] = ctx.facts.code(call.func)
    fsdp_checkpoint.convert(ctx, model, anchor)
    fsdp_memory.report(ctx, model, anchor, blocks)


def _refuse_what_cannot_shard(ctx: Context) -> None:
    facts, flow = ctx.facts, ctx.flow
    model = one_model_one_optimizer(
        ctx, "FSDP conversion", "convert to DDP (--to ddp), or call fully_shard on each "
        "model yourself before building its optimizer", "FSDP2 shards must be built before "
        "an optimizer takes the parameters")
    if model is None:
        return
    for call in facts.calls:
        assign = facts.parent.get(call)
        bound = isinstance(assign, cst.Assign) and any(
            flow.same(flow.place_of(t.target), model.place) for t in assign.targets)
        if method_name(call) in _HALF and isinstance(call.func, cst.Attribute) and (bound or
                flow.same(flow.place_of(flow.strip(call.func.value)), model.place)):
            ctx.refuse(call, "fsdp.half_weights",
                       f"`{facts.code(call)}` casts the weights to half precision: "
                       "FSDP2 keeps fp32 weights and computes in low precision through its "
                       "MixedPrecisionPolicy", "remove the cast and convert with --amp bf16")
            return


def _shard_site(ctx: Context, model: Model) -> tuple[cst.BaseStatement, str] | None:
    """The statement before which the model is sharded (the first one of the optimizer's
    block that reads the model's parameters, up to the one building the optimizer) and
    the model as code there. None (and the conversion refused) when there is none."""
    facts, flow = ctx.facts, ctx.flow
    optimizer = model.optimizer
    assert isinstance(optimizer, cst.Call)
    built = facts.statement(optimizer)
    block = facts.parent.get(built) if built is not None else None
    body = list(getattr(block, "body", ()))
    scope = facts.scope(optimizer)
    reached = model_code_at(ctx.facts, ctx.flow, model, optimizer)
    if built is None or built not in body or reached is None:
        ctx.refuse(optimizer, "fsdp.model_out_of_reach",
                   "the model cannot be reached where its optimizer is built",
                   "build the optimizer from the model where the model is built (same "
                   "function), then convert again")
        return None
    code, node = reached
    if any(True for _ in facts.enclosing_loops(optimizer)):
        ctx.refuse(optimizer, "fsdp.optimizer_in_loop",
                   "the optimizer is built inside a loop: FSDP2 shards the model "
                   "once, before the optimizer takes its parameters", "build the optimizer "
                   "once, before the training loop")
        return None
    anchor = next(stmt for stmt in body[:body.index(built) + 1] if any(
        method_name(c) in _PARAMETERS and isinstance(c.func, cst.Attribute)
        and flow.same(flow.place_of(flow.strip(c.func.value)), model.place)
        for c in facts.calls_in(stmt)) or stmt is built)
    for target in flow.bindings(flow.place_of(node) or model.place):
        stmt = facts.statement(target)
        value = fsdp_memory.bound_value(ctx, target)
        moved = isinstance(value, cst.Call) and (method_name(value) in MOVES or (
            facts.call_name(value) or "") in _SAME_MODEL)
        if stmt is not None and facts.scope(stmt) is scope and \
                facts.line(stmt) > facts.line(anchor) and not moved:
            ctx.refuse(stmt, "fsdp.model_rebound",
                       f"`{code}` is bound again after its optimizer is built (line "
                       f"{facts.line(built)}): FSDP2 shards the model before the optimizer "
                       "takes its parameters, so this model would not be sharded",
                       "build the model completely before its optimizer, then convert again")
            return None
    return anchor, code


def block_classes(ctx: Context) -> tuple[str, ...]:
    """The class names sharded one by one: those --shard names, else the repeated blocks
    found in the project."""
    if ctx.options.shard.replace(" ", "") != "auto":
        return tuple(dict.fromkeys(n for n in ctx.options.shard.replace(" ", "").split(",")
                                   if n))
    facts = ctx.facts
    found: list[str] = []
    for call in facts.calls:
        name = facts.call_name(call) or ""
        found += _TORCH_BLOCKS.get(name, ())
        if name in _LIST_OF_BLOCKS:
            found += _repeated(ctx, call)
    return tuple(dict.fromkeys(found))


def _named_blocks_exist(ctx: Context, model: Model, blocks: tuple[str, ...]) -> None:
    """--shard CLASS: a class that does not build the model would shard nothing on its
    own (refused where every class of the model is in the script)."""
    if ctx.options.shard.replace(" ", "") == "auto":
        return
    built = built_from(ctx, model)
    missing = [b for b in blocks if b not in built.names]
    if not missing:
        return
    named = ", ".join(missing)
    if built.unseen:
        ctx.plan.finding(model.optimizer, "fsdp.shard_unseen", f"--shard {named}: not a class "
                         f"the script shows building `{model.place.code}` (a library builds "
                         "part of it): sharded one by one if the model holds any",
                         severity="info")
        return
    classes = ", ".join(sorted(n for n in built.names if n[:1].isupper()))
    ctx.refuse(model.optimizer, "fsdp.shard_unknown", f"--shard {named}: no such class builds "
               f"`{model.place.code}` (it is made of {classes}): nothing would be sharded "
               "on its own", "name its repeated block classes with --shard, or use --shard "
               "auto")


def _repeated(ctx: Context, call: cst.Call) -> list[str]:
    """The class of `ModuleList([Block(...) for _ in range(n)])`, `Sequential(*[...])`
    or of a list of two or more calls of one class."""
    classes: list[str] = []
    for arg in call.args:
        value = arg.value
        if isinstance(value, (cst.ListComp, cst.GeneratorExp)) and isinstance(value.elt, cst.Call):
            classes.append(dotted(value.elt.func) or "")
        elif isinstance(value, cst.List) and len(value.elements) > 1:
            made = {dotted(e.value.func) if isinstance(e.value, cst.Call) else None
                    for e in value.elements}
            classes += [m for m in made if m] if len(made) == 1 else []
    return [c.rpartition(".")[2] for c in classes if c]


def _forward_methods(ctx: Context, model: Model) -> list[str]:
    """Methods of the model's class that call `self.forward(...)` themselves."""
    built = fsdp_memory.construction(ctx, model)
    cls = ctx.facts.local_definition(built) if built is not None else None
    if not isinstance(cls, cst.ClassDef) or not isinstance(cls.body, cst.IndentedBlock):
        return []
    return [stmt.name.value for stmt in cls.body.body if isinstance(stmt, cst.FunctionDef)
            and stmt.name.value != "forward" and any(
                isinstance(c.func, cst.Attribute) and c.func.attr.value == "forward"
                and dotted(c.func.value) == "self" for c in ctx.facts.calls_in(stmt))]


def _refuse_tied_blocks(ctx: Context, blocks: tuple[str, ...]) -> None:
    """`a.weight = b.weight` inside a block class, or through an indexed block: one
    parameter would be sharded in two groups."""
    facts = ctx.facts
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        target, value = dotted(assign.targets[0].target), assign.value
        source = facts.code(value)
        if target is None or not target.endswith((".weight", ".bias")) or not (
                isinstance(value, (cst.Attribute, cst.Subscript))
                and source.endswith((".weight", ".bias"))):
            continue
        owner = facts.enclosing_class(assign)
        indexed = "[" in source or "[" in facts.code(assign.targets[0].target)
        if owner is not None and owner.name.value in blocks or indexed:
            ctx.refuse(assign, "fsdp.tied_blocks",
                       f"`{target} = {source}` ties parameters across the blocks "
                       "FSDP2 shards one by one: one parameter would be sharded in two "
                       "groups", "tie only parameters outside the blocks (sharded with the "
                       "root), or name other block classes with --shard")
            return


def _shard(ctx: Context, model: Model, anchor: cst.BaseStatement, code: str,
           blocks: tuple[str, ...]) -> None:
    n, plan = ctx.names, ctx.plan
    ctx.need("torch", "dist", "fully_shard", at=anchor)
    policy = ""
    lines = ["# distrun: FSDP2 shards the model in place (it keeps its class): every rank "
             "starts from\n# rank 0's weights (FSDP2 does not broadcast them), then each "
             "block is sharded, then the rest\n"]
    if ctx.options.amp == "bf16":
        mixed = n.fresh("mp_policy")
        ctx.need("MixedPrecisionPolicy", at=anchor)
        lines.append(f"{mixed} = MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
                     "reduce_dtype=torch.float32)\n")
        policy = f", mp_policy={mixed}"
    lines += [code_of(line) for line in sync_bn_lines(ctx, model, code, anchor)]
    if not is_moved(ctx.facts, ctx.flow, model):
        lines.append(f"{code}.to({n.device})\n")
    tensor = n.fresh("tensor")
    lines.append(f"for {tensor} in [*{code}.parameters(), *{code}.buffers()]:\n"
                 f"    {n.dist}.broadcast({tensor}.detach(), 0)\n")
    if blocks:
        block = n.fresh("block")
        names = ", ".join(f'"{b}"' for b in blocks) + ("," if len(blocks) == 1 else "")
        lines.append(f"for {block} in reversed([m for m in {code}.modules() "
                     f"if type(m).__name__ in ({names})]):  # children first\n"
                     f"    fully_shard({block}{policy})\n")
    lines.append(f"fully_shard({code}{policy})\n")
    for method in _forward_methods(ctx, model):
        ctx.need("register_fsdp_forward_method", at=anchor)
        lines.append(f'register_fsdp_forward_method({code}, "{method}")  # it calls '
                     "self.forward(): FSDP2 gathers the weights around it too\n")
        plan.change(anchor, "fsdp.forward_method",
                    f"`{code}.{method}()` calls `self.forward()` directly, "
                    "past FSDP2's hooks: registered with register_fsdp_forward_method so "
                    "the weights are gathered around it")
    new = statements("".join(lines[1:]))
    new[0] = new[0].with_changes(leading_lines=[
        cst.EmptyLine(comment=cst.Comment(line)) for line in lines[0].splitlines()])
    plan.insert_before(anchor, new)
    each = f"each {', '.join(blocks)}, then " if blocks else ""
    plan.change(anchor, "fsdp.shard", f"`{code}` sharded with FSDP2's fully_shard ({each}the "
                f"root) before its optimizer is built, after rank 0's weights are broadcast; "
                f"it stays the script's model: forward passes, attributes and methods "
                "unchanged" + (", bf16 compute through MixedPrecisionPolicy (fp32 weights "
                               "and reduction)" if policy else ""))
    if not blocks:
        plan.finding(anchor, "fsdp.no_blocks",
                     f"no repeated blocks found in `{code}`'s classes: only "
                     "the root is sharded, so each forward pass gathers all the weights at "
                     "once (the peak memory of one full copy)", "name the block classes with "
                     "--shard CLASS,... (the layers repeated in a ModuleList)", "info")
    if ctx.options.amp == "bf16":
        plan.change(anchor, "fsdp.mixed_precision", "--amp bf16: MixedPrecisionPolicy(param_dtype="
                    "torch.bfloat16, reduce_dtype=torch.float32) on every fully_shard")
