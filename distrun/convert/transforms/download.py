"""Datasets downloaded by every rank at once: rank 0 downloads, the others wait.

    train_set = datasets.MNIST("data", train=True, download=True)
        ->  if RANK != 0:
                dist.barrier()  # rank 0 downloads first
            train_set = datasets.MNIST("data", train=True, download=True)
            if RANK == 0:
                dist.barrier()
    (accelerate: `with accelerator.main_process_first():` around it)

Every rank builds the dataset; only rank 0 finds the files missing and writes them, the
others wait for it and then find them there.

Won't: a download that is not a statement of its own, runs in a loop, or runs when an
imported module is loaded (before the process group exists): reported with the fix.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, keyword
from distrun.convert.build import Rewrite, statement, statements
from distrun.convert.context import Context, Transform
from distrun.convert.transforms.hand_downloads import (
    downloads_by_hand,
    run_hand_downloads_on_rank0,
)


def plan_downloads(ctx: Context) -> None:
    facts, n = ctx.facts, ctx.names
    for call in facts.calls:
        given = keyword(call, "download")
        if given is None or dotted(given.value) == "False" or downloads_by_hand(ctx, call):
            continue
        stmt = facts.statement(call)
        loop = next(iter(facts.enclosing_loops(call)), None)
        at_import = facts.function(call) is None and not facts.module_of(call).is_entry
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or loop \
                is not None or at_import:
            ctx.plan.finding(call, "download.rank0_first",
                             "every rank downloads the dataset at once: "
                             "files can be corrupted", f"download on rank 0 first: "
                             f"`if {n.rank} == 0: <dataset with download=True>`, then "
                             f"`{ctx.target.barrier(ctx, at=call)}`, then build it with "
                             "download=False on "
                             "every rank")
            continue
        small = stmt.body[0]
        first = ctx.target.main_process_first(ctx)
        if first is not None:
            ctx.plan.rewrite(stmt, _inside(first))
        else:
            barrier = ctx.target.barrier(ctx, at=call)
            # first: above the dataset data.py moved out of a DataLoader(...) call
            ctx.plan.insert_before(stmt, [statement(
                f"if {n.rank} != 0:\n    {barrier}  # rank 0 downloads first\n")],
                lead=True, first=True)
            after = f"if {n.rank} == 0:\n    {barrier}\n"
            if isinstance(small, cst.Return) and small.value is not None:
                # the barrier must run before the return: the value is kept in a name
                name = ctx.names.fresh("dataset")
                value = facts.code(small.value)
                ctx.plan.rewrite(stmt, _assigned(f"{name} = {value}\n"))
                after += f"return {name}\n"
            ctx.plan.insert_after(stmt, statements(after))
            ctx.need("dist", at=call)
        ctx.plan.change(call, "download.rank0_first",
                        "rank 0 downloads the dataset first, the other ranks "
                        "wait for it, then every rank reads the files")
    run_hand_downloads_on_rank0(ctx)


TRANSFORM = Transform("download", plan_downloads)


def _assigned(code: str) -> Rewrite:
    """The line `code` in place of the statement, its comments kept above it."""
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        new = cst.ensure_type(statement(code), cst.SimpleStatementLine)
        return new.with_changes(leading_lines=node.leading_lines)

    return rewrite


def _inside(head: str) -> Rewrite:
    """The statement inside `with HEAD:`, its comments above the with."""
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        with_node = cst.ensure_type(statement(f"with {head}:\n    pass\n"), cst.With)
        return with_node.with_changes(body=cst.IndentedBlock(
            body=[node.with_changes(leading_lines=())]), leading_lines=node.leading_lines)

    return rewrite
