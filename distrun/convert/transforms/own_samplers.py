"""Samplers of the project's own, and sample counts made from a loader's batch size
(for rebuild.py's sharing of a loader's sampler)."""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, keyword, positional, walk
from distrun.convert.context import Context


def sized_by_batch(ctx: Context, loader: cst.Call, count: cst.BaseExpression) -> bool:
    """Is `count` (a sampler's number of samples) a product with the loader's batch size
    (`iterations * args.batch_size`): a number of steps times one rank's batch?"""
    given = keyword(loader, "batch_size") or next(
        iter(positional(loader)[1:2]), None)
    size = dotted(given.value) if given is not None else None
    return size is not None and isinstance(count, cst.BinaryOperation) and isinstance(
        count.operator, cst.Multiply) and any(dotted(node) == size for node in walk(count)
                                              if isinstance(node, (cst.Name, cst.Attribute)))


def project_sampler(ctx: Context, made: cst.Call) -> bool:
    """Is `made` an instance of the project's own Sampler (a class deriving from torch's
    `Sampler`, with `__iter__`: FixMatch code's InfiniteSampler, a list of randperm passes
    drawn in `__init__`)? Its indices are listed as it yields them."""
    cls = ctx.facts.local_definition(made)
    if not isinstance(cls, cst.ClassDef) or ctx.flow.method(cls, "__iter__") is None:
        return False
    current: cst.ClassDef | None = cls
    while current is not None:
        if any((ctx.facts.qualname(b.value) or "").startswith("torch.utils.data")
               and (ctx.facts.qualname(b.value) or "").endswith("Sampler")
               for b in current.bases):
            return True
        current = ctx.flow.base_class(current)
    return False
