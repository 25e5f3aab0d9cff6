"""Gradient accumulation: no gradient all-reduce on the micro-batches that do not step.

With `--grad-accum-no-sync`, where a training loop calls `loss.backward()` on every
micro-batch but steps the optimizer only under a condition:
    loss = criterion(model(x), y) / accum         with (model.no_sync() if not (COND)
    loss.backward()                          ->         else contextlib.nullcontext()):
    if COND:                                         loss = criterion(model(x), y) / accum
        optimizer.step()                             loss.backward()
                                                 if COND: ...
The forward pass goes inside too: DDP decides at forward time whether the next backward
synchronises. With accelerate: `accelerator.no_sync(model)`.

Won't: a condition that reads what the micro-step computes (reported), or a step that is
not in the backward's own block.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, walk
from distrun.convert.plan import Plan, statement
from distrun.convert.transforms.model import WrappedModel, references


def plan_no_sync(facts: Facts, plan: Plan, models: list[WrappedModel]) -> None:
    if not plan.options.grad_accum_no_sync:
        return
    refs = {id(r): dotted(r) for m in models for r in references(facts, m)}  # type: ignore[arg-type]
    found = False
    for call in facts.calls:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "backward"):
            continue
        backward = facts.statement(call)
        if backward is None:
            continue
        block = facts.parent.get(backward)
        if not isinstance(block, cst.IndentedBlock) or backward not in block.body:
            continue
        body = list(block.body)
        index = body.index(backward)
        step_if = next((s for s in body[index + 1:] if isinstance(s, cst.If)
                        and _steps(facts, s)), None)
        if step_if is None:
            continue
        first = index
        model_code = None
        for i in range(index, -1, -1):
            called = [refs[id(c.func)] for c in facts.calls_in(body[i]) if id(c.func) in refs]
            if called:
                first, model_code = i, called[0]
        if model_code is None:
            continue
        cond = facts.code(step_if.test)
        assigned = _assigned_names(body[first: index + 1])
        if any(isinstance(n, cst.Name) and n.value in assigned
               for n in facts.names if facts.inside(n, step_if.test)):
            plan.finding(step_if, "grad-accum", "the step condition reads values of the "
                         "micro-step: no_sync not added", "skip the all-reduce with "
                         "`model.no_sync()` around the non-final micro-steps yourself")
            continue
        sync = (f"{plan.names.accelerator}.no_sync({model_code})" if plan.accelerate
                else f"{model_code}.no_sync()")
        nullcontext = f"{plan.names.contextlib}.nullcontext()"
        head = f"with ({sync} if not ({cond}) else {nullcontext}):\n    pass\n"

        def make(stmts: list[cst.BaseStatement], head: str = head) -> cst.BaseStatement:
            leading = stmts[0].leading_lines  # type: ignore[attr-defined]
            inner = [stmts[0].with_changes(leading_lines=()), *stmts[1:]]
            node = cst.ensure_type(statement(head), cst.With)
            return node.with_changes(body=cst.IndentedBlock(body=inner), leading_lines=leading)

        plan.wrap(body[first], backward, make)
        plan.needed_imports.add("contextlib")
        plan.change(body[first], "grad-accum", f"micro-steps that do not step the optimizer "
                    f"run under `{sync}`: their gradients are not all-reduced")
        found = True
    if not found:
        plan.finding(None, "grad-accum", "--grad-accum-no-sync: no loop steps the optimizer "
                     "under a condition after an unconditional backward", severity="info")


def _steps(facts: Facts, node: cst.If) -> bool:
    for call in facts.calls_in(node.body):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "step":
            owner = dotted(func.value) or ""
            if "opt" in owner.lower() or "scaler" in owner.lower():
                return True
    return False


def _assigned_names(stmts: list[cst.BaseStatement]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
                names.add(node.target.value)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(
                    node.target, cst.Name):
                names.add(node.target.value)
    return names

