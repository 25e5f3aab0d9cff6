"""Training metrics kept in meter objects (part of the training metrics, train_metrics.py).

    losses = AverageMeter()                     (pytorch/examples' imagenet, and most
    for x, y in train_loader:                    repositories after it: `update(val, n)`
        losses.update(loss.item(), x.size(0))    adds `val * n` to `sum`, `n` to `count`,
    print(losses.avg)                            and keeps `avg = sum / count`)

Each rank's meters hold its share of the batches: rank 0 would print its share's average.
After the loop, every meter's `sum` and `count` are all-reduced (summed) and its `avg`
made again from them: the average over every rank's samples, the single process's. A
meter is an object of a class of the project whose `update` adds to `self.sum` and
`self.count` and which sets `self.avg`; it is bound before the loop to a name, or held in
a dict literal of such meters (`avg_meters = {'loss': AverageMeter(), ...}`). Its `val`
(the last value) stays the rank's own.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, walk
from distrun.convert.context import Context
from distrun.convert.idioms import method_name


def meter_holders(ctx: Context, loop: cst.For, read_after: object) -> list[str]:
    """The meters `loop` updates, as expressions of tuples of them (`(losses,)`,
    `tuple(avg_meters.values())`), where they are read after the loop (`read_after(name)`)."""
    facts = ctx.facts
    classes = _meter_classes(ctx)
    if not classes:
        return []
    updated = set()
    for call in facts.calls_in(loop.body):
        if method_name(call) != "update" or not isinstance(call.func, cst.Attribute):
            continue
        holder = call.func.value
        if isinstance(holder, cst.Subscript):
            holder = holder.value
        if isinstance(holder, cst.Name):
            updated.add(holder.value)
    scope, start = facts.scope(loop), facts.line(loop)
    found = []
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or facts.scope(assign) is not scope or \
                facts.line(assign) >= start or len(assign.targets) != 1:
            continue
        name = dotted(assign.targets[0].target)
        if name not in updated or not read_after(name):  # type: ignore[operator]
            continue
        value = assign.value
        if _is_meter(ctx, value, classes):
            found.append(f"({name},)")
        elif isinstance(value, cst.Dict) and value.elements and all(
                isinstance(e, cst.DictElement) and _is_meter(ctx, e.value, classes)
                for e in value.elements):
            found.append(f"tuple({name}.values())")
    return list(dict.fromkeys(found))


def meters_code(holders: list[str], holder: str, names: tuple[str, str, str], device: str,
                reduce: str) -> str:
    """All-reduce the sums and counts of the meters in `holders`, then their averages;
    `names`: fresh names for the list of meters, an index and a meter."""
    meters, i, m = names
    return (f"{meters} = [*{', *'.join(holders)}]\n"
            f"{holder} = torch.tensor([float({m}.sum) for {m} in {meters}] + "
            f"[float({m}.count) for {m} in {meters}], dtype=torch.float64, "
            f"device={device})\n{reduce}"
            f"for {i}, {m} in enumerate({meters}):  # each meter over every rank's samples\n"
            f"    {m}.sum = {holder}[{i}].item()\n"
            f"    {m}.count = type({m}.count)({holder}[len({meters}) + {i}].item())\n"
            f"    {m}.avg = {m}.sum / {m}.count if {m}.count else {m}.avg\n")


def shown(holder: str) -> str:
    """`(losses,)` -> `losses`; `tuple(avg_meters.values())` -> `avg_meters`."""
    return holder.removeprefix("tuple(").removeprefix("(").split(",")[0].split(".")[0]


def _is_meter(ctx: Context, value: cst.BaseExpression, classes: set[str]) -> bool:
    if not isinstance(value, cst.Call):
        return False
    found = ctx.facts.local_definition(value)
    return isinstance(found, cst.ClassDef) and found.name.value in classes


def _meter_classes(ctx: Context) -> set[str]:
    """Classes of the project whose `update` adds to `self.sum` and `self.count` and that
    set `self.avg`."""
    names = set()
    for cls in ctx.facts.classes():
        update = ctx.facts.method(cls, "update")
        if update is None:
            continue
        added = {dotted(n.target) for n in walk(update.body) if isinstance(n, cst.AugAssign)}
        sets = {dotted(t.target) for n in walk(cls.body) if isinstance(n, cst.Assign)
                for t in n.targets}
        if {"self.sum", "self.count"} <= added and "self.avg" in sets:
            names.add(cls.name.value)
    return names
