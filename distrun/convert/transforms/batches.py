"""Batches made by hand, shared out among the ranks (part of the data transform).

A training loop over batches that a function of the script makes (a generator that
yields them, a class with `__iter__`) reads no DataLoader a sampler could shard: on
every rank it would train on every batch. Its iterable is handed to `rank_batches`
(defined with the set-up): rank 0 makes the batches, as the original does, and of each
WORLD_SIZE batches in a row the RANK-th is this rank's (sent by rank 0); a last round
with fewer batches than ranks is dropped, so every rank takes as many steps.

    for x, y in get_batches(words, 512):      ->  for x, y in rank_batches(get_batches(words, 512)):

A step now sees WORLD_SIZE batches (the global batch is WORLD_SIZE times the script's),
taken in the original's order: with the batch size divided by WORLD_SIZE, the same
samples make one step as in the original. Rank 0's batches are pickled to the others:
for large batches, a Dataset and a DataLoader are faster.

Won't: batches sliced from tensors inside the loop (`data[i:i + bs]`), a `range` of
window starts (word_language_model's `get_batch`): reported (`data.no_loader`).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import is_backward, is_optimizer_step, unwrap_iter
from distrun.convert.names import Names


def share_hand_made(ctx: Context, sharded_names: set[str]) -> bool:
    """Each innermost training loop over batches made by a function or class of the
    project (not a DataLoader): its iterable goes through `rank_batches`. True if any."""
    facts, n = ctx.facts, ctx.names
    done = False
    for loop in facts.for_loops:
        if not _steps_each_batch(ctx, loop):
            continue
        source = unwrap_iter(facts, loop.iter)
        if not isinstance(source, cst.Call) or not _makes_batches(ctx, source):
            continue
        ctx.need("itertools", "dist", at=loop)
        ctx.define_helper("rank_batches", loop, helper_code(n))
        ctx.plan.rewrite(source, lambda node: expression(f"{n.rank_batches}({code_of(node)})"))
        ctx.plan.change(loop, "data.rank_batches", f"batches made by "
                        f"`{facts.code(source.func)}(...)` -> `{n.rank_batches}(...)`: rank 0 "
                        "makes them, each rank trains on one of every WORLD_SIZE in a row (a "
                        "step sees WORLD_SIZE batches: divide the batch size by WORLD_SIZE to "
                        "train as before)")
        ctx.plan.shards_batches(loop)
        done = True
    return done


def _steps_each_batch(ctx: Context, loop: cst.For) -> bool:
    """Does `loop`'s own body (not a loop inside it) run a backward pass or a step?"""
    facts = ctx.facts
    return any((is_backward(c) or is_optimizer_step(c))
               and next(iter(facts.enclosing_loops(c)), None) is loop
               for c in facts.calls_in(loop.body))


def _makes_batches(ctx: Context, call: cst.Call) -> bool:
    """Is `call` a generator function of the project, or a class of it that iterates
    (`__iter__`)?"""
    defined = ctx.facts.local_definition(call)
    if isinstance(defined, cst.FunctionDef):
        return any(isinstance(node, (cst.Yield,)) for node in _walk(defined)
                   if ctx.facts.function(node) is defined)
    if isinstance(defined, cst.ClassDef):
        return ctx.flow.method(defined, "__iter__") is not None
    return False


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, child: cst.CSTNode) -> bool:
            found.append(child)
            return True

    node.visit(Collect())
    return found


def helper_code(n: Names) -> str:
    return f'''

def {n.rank_batches}(batches):
    """distrun: this rank's share of batches made by hand: rank 0 makes them, and of each
    WORLD_SIZE in a row the RANK-th is this rank's (a last incomplete round is dropped, so
    every rank takes as many steps)."""
    if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
        yield from batches
        return
    world, rank = {n.dist}.get_world_size(), {n.dist}.get_rank()
    made = iter(batches) if rank == 0 else None
    while True:
        group = [list({n.itertools}.islice(made, world)) if made is not None else None]
        {n.dist}.broadcast_object_list(group, src=0)
        if len(group[0]) < world:
            return
        yield group[0][rank]
'''
