"""Hazards: what cannot be converted mechanically becomes a finding with the fix.

Finds: BatchNorm layers (SyncBatchNorm on GPU), IterableDataset (a DistributedSampler cannot shard
it), CUDA_VISIBLE_DEVICES set inside the script, full-batch optimizers (LBFGS), parameters
frozen before training and unfrozen during it (DDP syncs only the parameters that required
grad when it was made: the unfrozen ones would train apart on each rank, an error),
samples mixed with others of their batch in the training code (mixup, CutMix: a
`torch.randperm` of the batch indexing it; each rank mixes within its own share, info).
Rewrites nothing.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert import batch_forms
from distrun.convert.analysis import Facts, dotted, keyword, positional, walk
from distrun.convert.batch_forms import LOSS_NAME, STATISTICS
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import ITERABLE_DATASET, is_optimizer, trains
from distrun.convert.transforms.per_sample_state import per_sample_state


def plan_hazards(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    batchnorm_seen = False
    for call in facts.calls:
        name = facts.call_name(call) or ""
        last = name.rsplit(".", 1)[-1]
        if last in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d") and not batchnorm_seen \
                and not ctx.options.sync_bn:  # --sync-bn: the change says what was done
            batchnorm_seen = True
            plan.finding(call, "hazards.batchnorm",
                         "BatchNorm computes statistics per rank: with small "
                         "per-rank batches results differ from one process",
                         "convert with --sync-bn: on GPU the model's BatchNorm layers become "
                         f"SyncBatchNorm before {ctx.target.wrap_call} (SyncBatchNorm does "
                         "not run on CPU)")
        if name == "torch.optim.LBFGS" and not plan.found("data.full_batch"):
            # full-batch training says it already: nothing is sharded
            plan.finding(call, "hazards.full_batch",
                         "LBFGS usually trains on the full batch: sharding "
                         "the data changes its steps", "check that each step's loss is a mean "
                         "over the whole global batch")
    shared = {ctx.stream_loaders[c] for c in ctx.streams_shared}
    unshared = {cls for c, cls in ctx.stream_loaders.items() if c not in ctx.streams_shared}
    for cls in facts.classes():
        if cls in shared and cls not in unshared:
            continue  # its loader's batches are dealt by rank_batches
        for base in cls.bases:
            if facts.qualname(base.value) in ITERABLE_DATASET:
                plan.finding(cls, "hazards.iterable_dataset", f"`{cls.name.value}` is an "
                             "IterableDataset: DistributedSampler cannot shard it, so every "
                             "rank would read the same items",
                             "in __iter__, keep every WORLD_SIZE-th item: "
                             "`itertools.islice(items, RANK, None, WORLD_SIZE)`")
    for node in facts.strings:
        if node.evaluated_value == "CUDA_VISIBLE_DEVICES":
            parent = facts.parent.get(facts.parent.get(node, node), node)
            if isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index)):
                plan.finding(node, "hazards.cuda_visible_devices",
                             "the script sets CUDA_VISIBLE_DEVICES: every rank "
                             "would see the same GPUs", "remove it; torchrun gives each rank "
                             "its own LOCAL_RANK")
    _unfrozen_in_training(ctx)
    _mixed_in_batch(ctx)
    _batch_statistics(ctx)
    per_sample_state(ctx)
    if not ctx.options.scale_lr:
        _rate_from_batch_size(ctx)


def _rate_from_batch_size(ctx: Context) -> None:
    """An optimizer's rate computed from the batch size that sizes the sharded training
    loader (the linear scaling rule by hand: `lr = base_lr * args.batch_size / 256`):
    that batch size is now each rank's, so the rate follows the rank's batch, not the
    global one (said, with the option that scales it)."""
    facts = ctx.facts
    sizes = {dotted(arg.value) for call in ctx.train_loaders
             for arg in [keyword(call, "batch_size") or (
                 positional(call)[1] if len(positional(call)) > 1 else None)]
             if arg is not None and dotted(arg.value) is not None}
    if not sizes:
        return
    for _ in range(3):  # `load_batch_size = min(args.max_device_batch_size, batch_size)`
        sizes |= {dotted(n) for a in facts.assigns if isinstance(a, cst.Assign) and any(
            dotted(t.target) in sizes for t in a.targets) for n in walk(a.value)
            if isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) is not None}
    sizes = {size for size in sizes if size is not None and "batch" in size.lower()}
    for call in facts.calls:
        if not is_optimizer(facts, call):
            continue
        lr = keyword(call, "lr")
        if lr is None:
            continue
        made = [lr.value] + [a.value for a in facts.assigns if isinstance(a, cst.Assign)
                             and dotted(lr.value) is not None and facts.scope(a) is facts.scope(
                                 call) and any(dotted(t.target) == dotted(lr.value)
                                               for t in a.targets)]
        read = {dotted(n) for value in made for n in walk(value)
                if isinstance(n, (cst.Name, cst.Attribute))}
        if read & sizes:
            ctx.plan.finding(call, "hazards.lr_from_batch", "the learning rate is computed "
                             f"from the batch size (`{' '.join(facts.code(made[-1]).split())}`), "
                             "which is now each rank's: the rate follows one rank's batch, "
                             "not the global batch of batch_size x WORLD_SIZE",
                             "convert with --scale-lr to multiply it by WORLD_SIZE, or compute "
                             "it from the global batch", severity="info")
            return


def _batch_statistics(ctx: Context) -> None:
    """A module of the project that normalises by statistics over its batch, written by
    hand (pytorch-flows' BatchNormFlow: `inputs.mean(0)`, `(inputs - mean).pow(2).mean(0)`
    while training): each rank uses its own share's, as BatchNorm does, silently."""
    facts = ctx.facts
    for cls in facts.classes():
        forward = facts.method(cls, "forward")
        if forward is None or LOSS_NAME.search(cls.name.value):
            continue  # a loss over the batch: batch_loss.py gathers it
        inputs = {p.name.value for p in forward.params.params[1:]}
        found = next((node for node in walk(forward) if (
            form := batch_forms.form_of(facts, node)) is not None and form.kind == STATISTICS
            or isinstance(node, cst.Call) and _over_dim0(node, inputs)), None)
        if found is not None:
            ctx.plan.finding(found, "hazards.batch_statistics",
                             f"`{cls.name.value}.forward` computes statistics over its batch "
                             f"(`{' '.join(facts.code(found).split())}`), a batch "
                             "normalisation by hand: each rank uses its own share's, where "
                             "one process used the whole batch's (as BatchNorm without "
                             "SyncBatchNorm)", "to match one process, all-reduce the sum and "
                             "the count of the batch before dividing (as SyncBatchNorm does)")


def _over_dim0(call: cst.Call, inputs: set[str]) -> bool:
    """`x.mean(0)`, `x.var(dim=0)`, `torch.std(x, 0)` of an input of the forward: a
    statistic over the batch."""
    func = call.func
    method = isinstance(func, cst.Attribute) and func.attr.value in ("mean", "var", "std")
    function = dotted(func) in ("torch.mean", "torch.var", "torch.std")
    if not (method or function):
        return False
    args = [a for a in call.args if a.keyword is None]
    operand = func.value if isinstance(func, cst.Attribute) and method else (
        args[0].value if args else None)
    dims = args[0 if method else 1:] if args else []
    dim = keyword(call, "dim")
    value = dim.value if dim is not None else (dims[0].value if dims else None)
    return isinstance(value, cst.Integer) and value.value == "0" and operand is not None \
        and any(isinstance(n, cst.Name) and n.value in inputs for n in walk(operand))


def _mixed_in_batch(ctx: Context) -> None:
    """`x[torch.randperm(n)]`, or `index = torch.randperm(n)` then `x[index]`, in a
    training loop or in a function a training loop calls: each sample is mixed with
    another of the same batch (mixup, CutMix), which under DDP is this rank's share."""
    facts = ctx.facts
    for call in facts.calls:
        if facts.call_name(call) != "torch.randperm" or not _in_training(ctx, call):
            continue
        parent = facts.parent.get(call)
        used: cst.CSTNode | None = call if _indexes(facts, call) else None
        if used is None and isinstance(parent, cst.Assign) and len(parent.targets) == 1 \
                and isinstance(parent.targets[0].target, cst.Name):
            name = parent.targets[0].target.value
            scope = facts.function(call) or facts.module_of(call).module
            used = next((n for n in _names_in(scope, name) if _indexes(facts, n)), None)
        if used is None:
            continue
        ctx.plan.finding(used, "hazards.batch_mix",
                         f"`{facts.code(_subscript(facts, used))}` pairs "
                         "each sample with another of its batch (mixup, CutMix): under DDP "
                         "each rank pairs only within its own share of the global batch "
                         "(the usual practice, but not the single process's training number "
                         "for number)", "to pair across the global batch, all_gather the "
                         "inputs and targets first, mix, then keep this rank's rows",
                         severity="info")


def _in_training(ctx: Context, node: cst.CSTNode) -> bool:
    """In a loop that trains, or in a function called from one."""
    facts = ctx.facts
    if any(trains(facts, loop.body, flow=ctx.flow) for loop in facts.enclosing_loops(node)):
        return True
    func = facts.function(node)
    return func is not None and any(
        any(trains(facts, loop.body, flow=ctx.flow) for loop in facts.enclosing_loops(site))
        for site, _ in ctx.flow.call_sites(func))


def _indexes(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` is (the first element of) the index of a subscript: `x[node]`, `x[node, :]`."""
    element = facts.parent.get(facts.parent.get(node))  # type: ignore[arg-type]
    holder = facts.parent.get(element)  # type: ignore[arg-type]
    return isinstance(element, cst.SubscriptElement) and isinstance(holder, cst.Subscript) \
        and holder.slice[0] is element


def _subscript(facts: Facts, index: cst.CSTNode) -> cst.CSTNode:
    return facts.parent[facts.parent[facts.parent[index]]]


def _names_in(scope: cst.CSTNode, name: str) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Visit(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                found.append(node)

    scope.visit(Visit())
    return found


def _unfrozen_in_training(ctx: Context) -> None:
    """`p.requires_grad = False` (or `requires_grad_(False)`) outside the training loops,
    then `= True` inside one (progressive unfreezing): DDP made before registered no
    hook for the frozen parameters, so once unfrozen their gradients stay each rank's
    own. A freeze inside the loop (a GAN's discriminator toggled each step) is left: its
    parameters required grad when DDP was made."""
    facts = ctx.facts
    loops = [loop for loop in [*facts.for_loops, *_whiles(facts)]
             if trains(facts, loop.body, flow=ctx.flow)]

    def in_training(node: cst.CSTNode) -> bool:
        return any(up is loop for up in facts.ancestors(node) for loop in loops)

    changes = _requires_grad_changes(facts)
    if not any(on is not True and not in_training(node) for node, on in changes):
        return
    for node, on in changes:
        if on is not False and in_training(node):
            ctx.plan.finding(
                node, "hazards.unfrozen_in_training",
                "parameters frozen before training are unfrozen here, inside the training "
                f"loop: {ctx.target.wrap_call}, made while they were frozen, does not sync "
                "them, so they would train apart on each rank",
                f"repeat {ctx.target.wrap_call} after unfreezing, or unfreeze before it and "
                "keep the frozen parameters out of the optimizer until their time",
                severity="error")


def _whiles(facts: Facts) -> list[cst.While]:
    return [node for node in facts.nodes(cst.While) if isinstance(node, cst.While)]


def _requires_grad_changes(facts: Facts) -> list[tuple[cst.CSTNode, bool | None]]:
    """Each `x.requires_grad = V` and `x.requires_grad_(V)`, with V: True, False, or None
    (not a literal: either)."""
    found: list[tuple[cst.CSTNode, bool | None]] = []
    for assign in facts.assigns:
        if isinstance(assign, cst.Assign) and any(
                isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                for t in assign.targets):
            found.append((assign, _literal(assign.value)))
    for call in facts.calls:
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "requires_grad_":
            found.append((call, _literal(call.args[0].value) if call.args else True))
    return found


def _literal(value: cst.BaseExpression) -> bool | None:
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return value.value == "True"
    return None


TRANSFORM = Transform("hazards", plan_hazards)
