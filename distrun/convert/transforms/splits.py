"""Random choices of data that every rank must make alike (part of the data transform).

A script that splits its data at random without a seed gets a different split on each
rank: each rank's validation set then overlaps the other ranks' training data, and a
DistributedSampler over "the" training set shards sets that differ. Made once, before
the loaders (not in a loop), the choice is made with a fixed seed instead, the same on
every rank, leaving the library's global random state as it was:

    random_split(ds, [n1, n2])   ->  random_split(ds, [n1, n2],
                                                  generator=torch.Generator().manual_seed(0))
    torch.randperm(n)            ->  torch.randperm(n, generator=torch.Generator().manual_seed(0))
    np.random.shuffle(idx)       ->  np.random.default_rng(0).shuffle(idx)
    np.random.permutation(n)     ->  np.random.default_rng(0).permutation(n)
    random.shuffle(idx)          ->  random.Random(0).shuffle(idx)

Only a choice made once: at the top level, or in a plain function (not a method: a
Dataset's `__getitem__` draws per sample) called from one place outside any loop. Left
alone: a call given its own generator, a script that seeds the library it uses (every
rank then draws the same), a draw in a loop or in what runs many times (per-step
randomness, per rank by design; a fresh seeded generator there would draw the same
every time).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import keyword
from distrun.convert.build import append_keyword, expression
from distrun.convert.context import Context

_TORCH = {"torch.utils.data.random_split": "random_split",
          "torch.utils.data.dataset.random_split": "random_split", "torch.randperm": "randperm"}
_NUMPY = {"numpy.random.shuffle", "numpy.random.permutation"}
_RANDOM = {"random.shuffle", "random.sample"}
_SEEDS = {
    "torch": {"torch.manual_seed", "torch.random.manual_seed"},
    "numpy": {"numpy.random.seed"},
    "random": {"random.seed"},
}
# Seed every library at once.
_SEED_ALL = {"lightning.seed_everything", "pytorch_lightning.seed_everything",
             "lightning.pytorch.seed_everything", "transformers.set_seed",
             "accelerate.utils.set_seed", "lightning_fabric.seed_everything"}
_GENERATOR = "torch.Generator().manual_seed(0)"


def same_splits(ctx: Context) -> None:
    """Each unseeded random choice of data made outside a loop: a fixed seed instead."""
    facts = ctx.facts
    seeded = {library for library, seeds in _SEEDS.items()
              if any(facts.call_name(c) in seeds | _SEED_ALL for c in facts.calls)}
    for call in facts.calls:
        name = facts.call_name(call) or ""
        library = "torch" if name in _TORCH else "numpy" if name in _NUMPY \
            else "random" if name in _RANDOM else None
        if library is None or library in seeded or keyword(call, "generator") is not None:
            continue
        if not _made_once(ctx, call):
            continue
        if library == "torch":
            ctx.plan.rewrite(call, lambda n: append_keyword(
                cst.ensure_type(n, cst.Call), "generator", expression(_GENERATOR)))
            new = f"{facts.code(call.func)}(..., generator={_GENERATOR})"
        elif not isinstance(call.func, cst.Attribute):
            continue  # `from numpy.random import shuffle`: no module to reach the rng
        else:
            module = facts.code(call.func.value)
            method = call.func.attr.value
            rng = f"{module}.default_rng(0)" if library == "numpy" else f"{module}.Random(0)"
            ctx.plan.rewrite(call.func, lambda _n, code=f"{rng}.{method}": expression(
                code))  # type: ignore[misc]
            new = f"{rng}.{method}(...)"
        ctx.plan.change(call, "data.same_split", f"`{facts.code(call.func)}(...)` draws "
                        f"without a seed: each rank would choose other data (a validation "
                        f"set overlapping another rank's training set); `{new}` makes the "
                        "same choice on every rank")


def _made_once(ctx: Context, node: cst.CSTNode, depth: int = 4) -> bool:
    """Does `node` run once per run: outside loops, at the top level or in a plain
    function called from one place that itself runs once (a few calls deep)?"""
    facts = ctx.facts
    if next(iter(facts.enclosing_loops(node)), None) is not None:
        return False
    func = facts.function(node)
    if func is None:
        return True
    if facts.enclosing_class(func) is not None or depth == 0:
        return False
    sites = ctx.flow.call_sites(func)
    return len(sites) == 1 and _made_once(ctx, sites[0][0], depth - 1)
