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

import libcst as cst

from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.names import Names
from distrun.convert.transforms.rebuild import sampler_made


def share_batch_sampler(ctx: Context, loader: cst.Call, batch_sampler: cst.BaseExpression,
                        why: str) -> None:
    """`batch_sampler=X` of the training DataLoader `loader` -> `batch_sampler=
    RankShareBatchSampler(X)`, whatever X is (a call, a name, an attribute); `why`: why
    the loader is one for training."""
    facts, n = ctx.facts, ctx.names
    made = sampler_made(facts, loader, batch_sampler)
    shown = f"{facts.code(made.func)}(...)" if isinstance(made, cst.Call) \
        else facts.code(batch_sampler)
    ctx.need("torch", "dist", at=loader)
    ctx.define_helper("rank_share_batches", loader, helper_code(n))
    ctx.plan.rewrite(batch_sampler,
                     lambda node: expression(f"{n.rank_share_batches}({code_of(node)})"))
    ctx.plan.change(loader, "data.share_batch_sampler", f"the loader's own batch sampler "
                    f"`{shown}` -> `{n.rank_share_batches}(...)` ({why}): every rank takes "
                    "rank 0's batches (sent to all at each step, so the ranks need not draw "
                    "alike) and keeps 1/WORLD_SIZE of each. The global batch stays the batch "
                    "sampler's: batch N on 1 process is N/WORLD_SIZE per rank")
    ctx.plan.splits_batches(loader)


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
    where the job's backend is another, NCCL: no wait on the GPU at each step)."""

    def __init__(self, batch_sampler):
        self.batch_sampler = batch_sampler
        self.group = None

    def __getattr__(self, name):
        if name in ("batch_sampler", "group"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.batch_sampler, name)

    def __len__(self):
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
            holder = [next(own, None)]  # drawn on every rank, rank 0's used
            {n.dist}.broadcast_object_list(holder, src=0, group=self.group)
            batch = holder[0]
            if batch is None:
                return
            batch = batch.tolist() if hasattr(batch, "tolist") else list(batch)
            share = -(-len(batch) // world)
            batch = (batch * world)[:share * world]
            yield batch[rank * share:(rank + 1) * share]
'''
