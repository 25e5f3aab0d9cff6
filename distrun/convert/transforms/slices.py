"""Batches cut by hand from in-memory data in the training loop, split among the ranks
(part of the data transform).

A loop over batch starts, `for i in range(0, N, batch_size):` (or `for b, i in
enumerate(range(...))`), that takes its batch as a
slice (`X[i:i + batch_size]`, `X[i * bs:(i + 1) * bs]`) or as a slice of a shuffled index
(`idx = permutation[i:i + batch_size]`, then `X[idx]`: STGCN's train_epoch) reads no
DataLoader a sampler could shard: every rank would train on every batch. Each such slice
goes through `rank_slice`, which keeps every WORLD_SIZE-th sample of the batch from the
RANK-th, so the ranks split each batch of the original among them: the same steps, the
same global batch, the original's training (exact when the batch size is a multiple of
WORLD_SIZE; a last batch smaller than WORLD_SIZE gives the ranks without a sample its
last one, as DistributedSampler pads). A permutation the slices read, drawn in the same
function (`torch.randperm(n)`, `np.random.permutation(n)`), is rank 0's on every rank:

    permutation = torch.randperm(n)       ->  permutation = rank0_value(torch.randperm(n))
    for i in range(0, n, batch_size):         for i in range(0, n, batch_size):
        idx = permutation[i:i + batch_size]       idx = rank_slice(permutation[i:i + batch_size])

Only where the loop steps by a batch size (a name saying `batch` or `bs` in the range's
step or in the slice): a slice of time steps (`data[i:i + bptt]`, word_language_model's
get_batch) is not a batch of samples, and only slices in the loop's own body.
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import is_backward, is_optimizer_step
from distrun.convert.names import Names
from distrun.convert.syntax import walk
from distrun.convert.transforms.rank0_values import helper_code as rank0_value_code

_BATCH = re.compile(r"batch|(^|[._])bs($|_)", re.IGNORECASE)
_PERMUTATIONS = {"torch.randperm", "numpy.random.permutation"}


def share_slices(ctx: Context) -> bool:
    """Each slice a training loop over batch starts takes its batch with: through
    `rank_slice`. True if any."""
    facts, n = ctx.facts, ctx.names
    done = False
    for loop in facts.for_loops:
        var, starts = _batch_starts(loop)
        if var is None or starts is None or not _steps(ctx, loop):
            continue
        by_batch = _BATCH.search(facts.code(starts)) is not None
        cuts = [(node, axis) for node in walk(loop.body) if isinstance(node, cst.Subscript)
                and (axis := _cut(facts.code(node), node, var, by_batch)) is not None
                and facts.function(node) is facts.function(loop)]
        if not cuts:
            continue
        ctx.need("dist", at=loop)
        ctx.define_helper("rank_slice", loop, helper_code(n))
        for cut, axis in cuts:
            dim = f", dim={axis}" if axis else ""
            ctx.plan.rewrite(cut, lambda node, dim=dim: expression(  # type: ignore[misc]
                f"{n.rank_slice}({code_of(node)}{dim})"))
            ctx.plan.change(cut, "data.rank_slices", f"the batch cut by hand `"
                            f"{facts.code(cut)}` -> `{n.rank_slice}(...)`: each rank takes "
                            "every WORLD_SIZE-th of its samples, so the ranks split each of "
                            "the original's batches (the same steps and global batch; exact "
                            "when the batch size is a multiple of WORLD_SIZE)")
            _same_permutation(ctx, cut, loop)
        ctx.plan.splits_batches(loop)
        done = True
    return done


def _range(iterable: cst.BaseExpression) -> bool:
    return isinstance(iterable, cst.Call) and dotted(iterable.func) == "range"


def _batch_starts(loop: cst.For) -> tuple[str | None, cst.BaseExpression | None]:
    """The loop's variable of batch starts and its `range(...)`: `for i in range(...)`,
    or `for batch_idx, start in enumerate(range(0, N, batch_size))` (forgetting events'
    run_mnist.py)."""
    target, iterable = loop.target, loop.iter
    if isinstance(target, cst.Name) and _range(iterable):
        return target.value, iterable
    if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2 and isinstance(
            target.elements[1].value, cst.Name) and isinstance(iterable, cst.Call) and dotted(
            iterable.func) == "enumerate" and len(iterable.args) == 1 and _range(
            iterable.args[0].value):
        return target.elements[1].value.value, iterable.args[0].value
    return None, None


def _steps(ctx: Context, loop: cst.For) -> bool:
    """Does the loop's own body run a backward pass or an optimizer step?"""
    facts = ctx.facts
    return any((is_backward(c) or is_optimizer_step(c))
               and next(iter(facts.enclosing_loops(c)), None) is loop
               for c in facts.calls_in(loop.body))


def _cut(code: str, node: cst.Subscript, var: str, by_batch: bool) -> int | None:
    """The axis of `X[i:i + batch_size]`, `X[i * bs:(i + 1) * bs]`, `X[:, b:b + bs, :]`
    (sequence-first tensors: the batch on axis 1): one slice whose bounds read the loop's
    variable, the other axes whole (`:`), in a loop (or a slice) that says it steps by a
    batch size. None if not such a cut."""
    parts = [e.slice for e in node.slice]
    cuts = [i for i, part in enumerate(parts) if not (isinstance(part, cst.Slice) and all(
        b is None for b in (part.lower, part.upper, part.step)))]
    if len(cuts) != 1 or not isinstance(parts[cuts[0]], cst.Slice):
        return None
    cut = parts[cuts[0]]
    assert isinstance(cut, cst.Slice)
    bounds = [b for b in (cut.lower, cut.upper) if b is not None]
    names = {x.value for b in bounds for x in walk(b) if isinstance(x, cst.Name)}
    taken = var in names and cut.step is None and (
        by_batch or _BATCH.search(code.partition("[")[2]) is not None)
    return cuts[0] if taken else None


def _same_permutation(ctx: Context, cut: cst.Subscript, loop: cst.For) -> None:
    """`permutation = torch.randperm(n)` before the loop, in its function, read by the
    cut: rank 0's on every rank (each rank must split the same batches)."""
    facts = ctx.facts
    base = dotted(cut.value)
    if base is None or "." in base:
        return
    scope, name = facts.function(loop), ctx.names.rank0_value
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
            continue
        value = assign.value
        if facts.call_name(value) not in _PERMUTATIONS \
                or facts.function(assign) is not scope or facts.line(assign) > facts.line(loop) \
                or not any(dotted(t.target) == base for t in assign.targets):
            continue
        ctx.need("dist", at=value)
        ctx.define_helper("rank0_value", value, rank0_value_code(ctx.names))
        ctx.plan.rewrite(value, lambda node: expression(f"{name}({code_of(node)})"))
        ctx.plan.change(value, "data.same_split", f"`{facts.code(value.func)}(...)` draws "
                        f"the order the batches are cut in: `{name}(...)`, every rank takes "
                        "rank 0's (each rank must split the same batches)")


def helper_code(n: Names) -> str:
    return f'''

def {n.rank_slice}(batch, dim=0):
    """distrun: this rank's part of a batch cut by hand: every WORLD_SIZE-th sample from
    the RANK-th (a batch smaller than WORLD_SIZE gives a rank without a sample its last
    one, as DistributedSampler pads), so the ranks split each batch among them. `dim`:
    the batch's axis (1 for sequence-first tensors)."""
    if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
        return batch
    if dim == 0:  # (a list too)
        part = batch[{n.dist}.get_rank()::{n.dist}.get_world_size()]
        return part if len(part) else batch[-1:]
    whole = (slice(None),) * dim
    part = batch[whole + (slice({n.dist}.get_rank(), None, {n.dist}.get_world_size()),)]
    return part if part.shape[dim] else batch[whole + (slice(-1, None),)]
'''
