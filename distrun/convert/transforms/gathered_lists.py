"""Lists of per-sample values collected over a sharded training loop and read after it
(part of the training metrics, train_metrics.py):

    preds, labels = [], []
    for x, y in train_loader:
        ...
        preds += torch.round(out).flatten().cpu()    (or .extend(...), or .append(
        labels += y.flatten().cpu()                   out.argmax(1).cpu()), .tolist()...)
    acc = accuracy(preds, labels); report = classification_report(labels, preds)

Each rank holds its share's items: rank 0 would compute the accuracy, the report or the
AUC of its share and print it as the training's. Right after the loop every rank's lists
are gathered (`all_gather_object`) and each list is made the items of all the ranks, rank
by rank: the lists collected together stay aligned item by item, and a measure that does
not depend on the order (an accuracy, a report, a sum) is the single process's (less the
samples a DistributedSampler repeats to even the shares).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, walk
from distrun.convert.context import Context
from distrun.convert.idioms import method_name, receiver

# What a value appended per batch ends with when it holds the batch's samples' values
_PER_SAMPLE = frozenset({"cpu", "tolist", "numpy", "detach"})


def grown_lists(facts: Facts, loop: cst.For) -> list[str]:
    """Names set to `[]` before `loop` in its function and grown inside it by `+=`,
    `.extend(...)`, or `.append(...)` of a value taken off the device (`.cpu()`,
    `.tolist()`, `.numpy()`, `.detach()`)."""
    grown: list[str] = []
    for node in walk(loop.body):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
            grown.append(dotted(node.target) or "")
    for call in facts.calls_in(loop.body):
        name = method_name(call)
        if name == "extend" or name == "append" and len(call.args) == 1 and isinstance(
                value := call.args[0].value, cst.Call) and method_name(value) in _PER_SAMPLE:
            grown.append(receiver(call) or "")
    scope, start = facts.scope(loop), facts.line(loop)
    found: list[str] = []
    for assign in facts.assigns:
        if isinstance(assign, cst.Assign) and facts.scope(assign) is scope and facts.line(
                assign) < start and facts.module_of(assign) is facts.module_of(loop):
            for target, value in _pairs(assign):
                name = dotted(target)
                if isinstance(value, cst.List) and not value.elements and name in grown \
                        and "." not in name and name not in found:
                    found.append(name)
    return found


def _pairs(assign: cst.Assign) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of `a = []` and of `a, b = [], []`."""
    pairs = []
    for target in assign.targets:
        if isinstance(target.target, cst.Tuple) and isinstance(assign.value, cst.Tuple) \
                and len(target.target.elements) == len(assign.value.elements):
            pairs += [(t.value, v.value) for t, v in zip(
                target.target.elements, assign.value.elements, strict=True)]
        else:
            pairs.append((target.target, assign.value))
    return pairs


def gather_code(ctx: Context, loop: cst.For, names: list[str]) -> str:
    """Every rank's items of `names`, in each list, rank by rank."""
    holder = ctx.names.fresh("gathered")
    code = ctx.target.gather_objects(ctx, holder, f"[{', '.join(names)}]", at=loop)
    for i, name in enumerate(names):
        code += f"{name}[:] = [item for part in {holder} for item in part[{i}]]\n"
    return code
