"""A loader only read by a pass that does not train (part of the data transform).

    def get_mean_and_std(dataset):
        loader = DataLoader(dataset, batch_size=1, shuffle=True)
        mean = torch.zeros(3)
        for inputs, targets in loader:
            mean += inputs.mean(dim=(0, 2, 3))
        return mean / len(dataset)

A loader whose use is not followed is taken for a training loader when it shuffles; this
one is made, read and dropped in a function that never trains (no backward, no optimizer
step, in it or in what it calls; no method of an object it cannot follow named like a
training step, `trainer.train_step(batch)`): a statistics pass. Sharded, each rank would sum its
share and divide by the whole set's size, silently; left whole, every rank computes the
original's values. Said in the report (info).
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.context import Context
from distrun.convert.idioms import trains, unwrap_iter


def statistics_pass(ctx: Context, call: cst.Call, names: set[str]) -> bool:
    """`call` is assigned to a local name of a function that never trains, and that name
    is only iterated there (a `for` over it, `enumerate`/`tqdm` around it), or measured
    (`len(...)`): never returned, kept, passed on or stepped with `next()`."""
    facts = ctx.facts
    func = facts.function(call)
    parent = facts.parent.get(call)
    if func is None or not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
        return False
    target = parent.targets[0].target
    if not isinstance(target, cst.Name) or names != {target.value}:
        return False
    name = target.value
    if trains(facts, func, flow=ctx.flow):
        return False
    read: list[cst.Name] = []
    loops: list[cst.For] = []
    generator: list[cst.Yield] = []  # its batches may go anywhere

    class Visit(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name and node is not target:
                read.append(node)

        def visit_Yield(self, node: cst.Yield) -> None:
            generator.append(node)

        def visit_For(self, node: cst.For) -> None:
            iterated = unwrap_iter(facts, node.iter)
            if isinstance(iterated, cst.Name) and iterated.value == name:
                loops.append(node)

    func.body.visit(Visit())
    iterated = {id(unwrap_iter(facts, loop.iter)) for loop in loops}
    for node in read:
        arg = facts.parent.get(node)
        holder = facts.parent.get(arg) if isinstance(arg, cst.Arg) else None
        measured = isinstance(holder, cst.Call) and dotted(holder.func) == "len"
        if id(node) not in iterated and not measured:
            return False
    return bool(loops) and not generator and not any(_may_train(ctx, loop) for loop in loops)


# Methods of objects the analysis cannot follow (a library's trainer or engine) that may
# run a training step: a loop calling one is not a statistics pass (sharded as before).
_TRAINING_VERBS = re.compile(r"(^|_)(step|steps|train|fit|update|backward|optimi[sz]e|learn)"
                             r"($|_)")


def _may_train(ctx: Context, loop: cst.For) -> bool:
    for call in ctx.facts.calls_in(loop.body):
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else (
            call.func.value if isinstance(call.func, cst.Name) else "")
        if ctx.flow.callee(call) is None and _TRAINING_VERBS.search(method):
            return True
    return False
