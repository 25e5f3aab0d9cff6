"""A training loader given its own batch sampler (part of the data transform).

    DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds), 64, drop_last=False))
->  DataLoader(ds, batch_sampler=RankShareBatchSampler(BatchSampler(RandomSampler(ds), ...)))

A batch sampler decides the batches themselves (bucketing by length, grouping, an
infinite sampler that never ends a pass): no DistributedSampler can take its place. Its
batches are shared out instead: every rank goes through the SAME batches and keeps its
share of each (contiguous, equal, WORLD_SIZE of them), so a step trains on the
original's batch: batch N on 1 process is N/WORLD_SIZE per rank, the global batch and
the number of steps stay the original's.

The batches must be the same on every rank, and a batch sampler drawing from torch's
global generator draws alike only where every rank seeded torch alike and made the same
draws before: silently wrong otherwise (ranks training on overlapping shares). So rank 0
sends its batch to the others at each step (`dist.broadcast_object_list`): right for
unseeded scripts too. Under another backend than gloo (NCCL), the broadcast goes through
a gloo group of its own, made at the first pass: over NCCL it would wait at each step for
the GPU work queued before it. Every
rank still iterates its own batch sampler in step with rank 0, so the random numbers it
draws after (a model built later, a random choice in the loop) stay the original's.
What it costs: one object broadcast per batch over gloo (about 1 ms on one machine),
made in the main process (DataLoader workers receive indices only).

No `set_epoch` is placed for such a loader: the batches are the original's, drawn as
the original draws them. `loader.batch_sampler.set_epoch(...)` written by the script
still reaches its own batch sampler (every attribute does).
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert import batch_forms
from distrun.convert.analysis import Facts
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.models import without_gradients
from distrun.convert.names import Names


def share_batch_sampler(ctx: Context, loader: cst.Call, batch_sampler: cst.BaseExpression,
                        why: str) -> None:
    """`batch_sampler=X` of the training DataLoader `loader` -> `batch_sampler=
    RankShareBatchSampler(X)`, whatever X is (a call, a name, an attribute); `whole=True`
    where X groups its batches by class; `why`: why the loader is one for training."""
    facts, n = ctx.facts, ctx.names
    made = sampler_made(facts, loader, batch_sampler)
    shown = f"{facts.code(made.func)}(...)" if isinstance(made, cst.Call) \
        else facts.code(batch_sampler)
    # (a loss over the batch with itself is gathered from every rank (batch_loss): a
    # split batch is then whole again, the original's loss)
    whole = isinstance(made, cst.Call) and grouped_by_class(facts, made) and not any(
        batch_forms.form_of(facts, node) is not None and not without_gradients(facts, node)
        for node in list(facts.parent))
    ctx.need("torch", "dist", at=loader)
    ctx.define_helper("rank_share_batches", loader, helper_code(n))
    extra = ", whole=True" if whole else ""
    ctx.plan.rewrite(batch_sampler, lambda node: expression(
        f"{n.rank_share_batches}({code_of(node)}{extra})"))
    if whole:
        ctx.plan.change(loader, "data.whole_batches", f"the loader's own batch sampler "
                        f"`{shown}` groups its batches by class (episodes, P x K batches): "
                        f"-> `{n.rank_share_batches}(..., whole=True)` ({why}): every rank "
                        "takes rank 0's batches, each rank whole ones (one of every "
                        "WORLD_SIZE in a row), since a loss over a batch's classes needs the "
                        "whole batch. A step trains on WORLD_SIZE batches and an epoch has "
                        "1/WORLD_SIZE of the steps")
        ctx.plan.shards_batches(loader)
        return
    ctx.plan.change(loader, "data.share_batch_sampler", f"the loader's own batch sampler "
                    f"`{shown}` -> `{n.rank_share_batches}(...)` ({why}): every rank takes "
                    "rank 0's batches (sent to all at each step, so the ranks need not draw "
                    "alike) and keeps 1/WORLD_SIZE of each. The global batch stays the batch "
                    "sampler's: batch N on 1 process is N/WORLD_SIZE per rank")
    ctx.plan.splits_batches(loader)


def sampler_made(facts: Facts, loader: cst.Call, sampler: cst.BaseExpression
                 ) -> cst.BaseExpression:
    """The expression that made `sampler`: itself, or the value of the one assignment of
    its name in the loader's scope (`train_sampler = RandomSampler(...)`)."""
    if isinstance(sampler, cst.Name):
        values = [a.value for a in facts.assigns if isinstance(a, cst.Assign) and any(
            isinstance(t.target, cst.Name) and t.target.value == sampler.value
            for t in a.targets) and facts.scope(a) is facts.scope(loader)]
        return values[0] if len(values) == 1 else sampler
    return sampler


_BY_CLASS = re.compile(r"label|target|class|(^|[._])y$|n_way|shot", re.IGNORECASE)


def grouped_by_class(facts: Facts, made: cst.Call) -> bool:
    """A batch sampler built from the labels (`PrototypicalBatchSampler(labels=y,
    classes_per_it=60, ...)`, `BalancedBatchSampler(ds.train_labels, n_classes=10,
    n_samples=25)`): its batches are groups of classes, which a loss reads whole."""
    return any(_BY_CLASS.search(arg.keyword.value if arg.keyword else "")
               or _BY_CLASS.search(facts.code(arg.value)) for arg in made.args)


def groups_by_class(facts: Facts) -> bool:
    """Does the project build a batch sampler of its own class from the labels?"""
    for call in facts.calls:
        found = facts.local_definition(call)
        if isinstance(found, cst.ClassDef) and (
                "Sampler" in found.name.value
                or any("Sampler" in facts.code(b.value) for b in found.bases)) \
                and grouped_by_class(facts, call):
            return True
    return False


def helper_code(n: Names) -> str:
    return f'''

class {n.rank_share_batches}(torch.utils.data.Sampler):
    """distrun: `batch_sampler`'s batches, the same on every rank, each rank keeping its
    share of each, so a step trains on the original's batch (N on 1 process: N/WORLD_SIZE
    per rank). Rank 0's batch is sent to every rank at each step (right even where the
    ranks' random draws differ, an unseeded run); every rank still iterates its own
    `batch_sampler` in step, so the random numbers it draws stay the original's. A batch
    is cut into WORLD_SIZE equal contiguous shares: one that does not divide is padded by
    repeating its first indices, and one of fewer than WORLD_SIZE indices is repeated until
    every rank has one, so those samples count twice in that step. Infinite batch samplers
    work (one batch at a time); len() is the original's; set_epoch and any other
    attribute reach `batch_sampler`. The batches go through a gloo group (one of its own
    where the job's backend is another, NCCL: no wait on the GPU at each step).
    `whole=True` (batches grouped by class: episodes, P x K): of each WORLD_SIZE batches
    in a row the RANK-th is this rank's, whole (a last round of fewer batches than ranks
    repeats its own), so a step trains on WORLD_SIZE of them and len() is 1/WORLD_SIZE."""

    def __init__(self, batch_sampler, whole=False):
        self.batch_sampler = batch_sampler
        self.whole = whole
        self.group = None

    def __getattr__(self, name):
        if name in ("batch_sampler", "group", "whole"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.batch_sampler, name)

    def __len__(self):
        if self.whole and {n.dist}.is_initialized():
            return -(-len(self.batch_sampler) // {n.dist}.get_world_size())
        return len(self.batch_sampler)

    def __iter__(self):
        if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
            yield from self.batch_sampler
            return
        world, rank = {n.dist}.get_world_size(), {n.dist}.get_rank()
        if self.group is None and {n.dist}.get_backend() != "gloo":
            self.group = {n.dist}.new_group(backend="gloo")
        own = iter(self.batch_sampler)
        while True:
            # drawn on every rank, rank 0's used: one batch, or WORLD_SIZE whole ones
            holder = [[b for _, b in zip(range(world if self.whole else 1), own)]]
            {n.dist}.broadcast_object_list(holder, src=0, group=self.group)
            batches = [b.tolist() if hasattr(b, "tolist") else list(b) for b in holder[0]]
            if not batches:
                return
            if self.whole:  # a short last round: its batches again, every rank a step
                yield batches[rank % len(batches)]
                if len(batches) < world:
                    return
                continue
            batch = batches[0]
            share = -(-len(batch) // world)
            batch = (batch * world)[:share * world]
            yield batch[rank * share:(rank + 1) * share]
'''
