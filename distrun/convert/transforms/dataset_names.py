"""The dataset a DataLoader call builds in its own arguments, named so that a sampler can
be given it (part of the data transform)."""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.context import Context
from distrun.convert.transforms.loader_names import construction_names


def hoist_dataset(ctx: Context, call: cst.Call, ds_arg: cst.Arg) -> str | None:
    """The name the dataset built inside the DataLoader call `call` gets (assigned just
    before its statement, named after the loader: `train_dataset`), or the expression
    itself when it can be read twice; None (said) where it cannot be named."""
    facts, plan = ctx.facts, ctx.plan
    stmt = facts.statement(call)
    inner = next((up for up in facts.ancestors(call) if isinstance(up, _OWN_SCOPES)), None)
    if inner is not None and _plain(ds_arg.value):
        return facts.code(ds_arg.value)  # `datasets[x]` in a comprehension: read it twice
    if not isinstance(stmt, cst.SimpleStatementLine) or inner is not None:
        plan.finding(call, "data.unnamed_dataset",
                     "the dataset is built inside the DataLoader call in a "
                     "place where it cannot be named; loader left unsharded",
                     "assign the dataset to a variable first, then convert again")
        return None
    base = "dataset"
    named = sorted((n for n in construction_names(facts, call) if "loader" in n),
                   key=lambda n: (n.startswith("get"), len(n), n))
    stems = [re.sub(r"\W+", "_", re.sub(r"loaders?", "", n)).strip("_") for n in named]
    if stems and stems[0]:
        base = f"{stems[0]}_dataset"
    name = ctx.names.fresh(base)
    plan.hoist(ds_arg.value, stmt, name)  # as the other rules rewrite it (a draw in it)
    plan.change(call, "data.name_dataset",
                f"dataset assigned to `{name}` so the sampler can see it")
    return name


# Expressions with names of their own: a dataset read there cannot be named before them.
_OWN_SCOPES = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)


def _plain(expr: cst.BaseExpression) -> bool:
    """A name, an attribute or an index of them (`datasets[x]`, `self.sets[phase]`): read
    twice, it is the same object."""
    if isinstance(expr, cst.Subscript):
        return _plain(expr.value) and all(
            isinstance(e.slice, cst.Index) and _plain(e.slice.value) for e in expr.slice)
    return dotted(expr) is not None or isinstance(expr, (cst.SimpleString, cst.Integer))
