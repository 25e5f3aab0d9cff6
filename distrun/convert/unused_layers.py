"""Layers a model builds and never uses (for the DDP target's wrap).

    class EncoderRNN(nn.Module):
        def __init__(self, ...):
            self.gru = nn.GRU(...)
            self.combine = nn.Linear(2 * hidden, hidden)   # never read again
        def forward(self, x): ...                           # uses self.gru only

DDP expects a gradient for every parameter at every step: the first step goes through,
the second stops on every rank with "Expected to have finished reduction in the prior
iteration ... Parameter indices which did not receive grad". A layer set on `self` in
the model class's `__init__` (or a class it derives from) and read nowhere else in the
family's methods gets none: the wrap passes `find_unused_parameters=True`, said with the
layer's line. Only what is certain counts: a class that reaches its attributes by name
(`getattr(self, ...)`, `self.__dict__`, `self.children()`, `self.modules()`, `setattr`) is
left alone. A layer called but whose output never reaches the loss is not seen here;
launch's report gives the hint when DDP stops on it.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.context import Context
from distrun.convert.models import Model

_BY_NAME = frozenset({"getattr", "setattr", "hasattr", "vars"})
_WALKS = frozenset({"children", "modules", "named_children", "named_modules", "__dict__",
                    "_modules"})


def unused_layers(ctx: Context, model: Model) -> list[tuple[str, cst.CSTNode]]:
    """(`Class.attribute`, the assignment) of each layer the model's classes build in
    `__init__` and never read."""
    found: list[tuple[str, cst.CSTNode]] = []
    for cls in sorted(ctx.flow.instances(model.place), key=lambda c: ctx.facts.line(c)):
        family = _family(ctx, cls)
        if any(_by_name(ctx, member) for member in family):
            continue
        read = set().union(*(_read(member) for member in family))
        for member in family:
            init = ctx.facts.method(member, "__init__")
            for attr, node in _layers_set(ctx, init) if init is not None else []:
                if attr not in read:
                    found.append((f"{member.name.value}.{attr}", node))
    return found


def _family(ctx: Context, cls: cst.ClassDef) -> list[cst.ClassDef]:
    members: list[cst.ClassDef] = []
    current: cst.ClassDef | None = cls
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        members.append(current)
        current = ctx.flow.base_class(current)
    return members


def _layers_set(ctx: Context, init: cst.FunctionDef) -> list[tuple[str, cst.CSTNode]]:
    """`self.x = nn.Layer(...)` (a torch.nn class, or a class of the project) in `init`."""
    found: list[tuple[str, cst.CSTNode]] = []
    for line in init.body.body:
        small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(
            line.body) == 1 else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not isinstance(
                small.value, cst.Call):
            continue
        target = dotted(small.targets[0].target) or ""
        name = ctx.facts.call_name(small.value) or ""
        layer = name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper() \
            and name not in ("torch.nn.Parameter", "torch.nn.ModuleList",
                             "torch.nn.ModuleDict", "torch.nn.ParameterList")
        own = ctx.facts.local_definition(small.value)
        if target.startswith("self.") and target.count(".") == 1 and (
                layer or isinstance(own, cst.ClassDef)):
            found.append((target.removeprefix("self."), line))
    return found


def _read(cls: cst.ClassDef) -> set[str]:
    """The attributes of `self` read anywhere in the class (an assignment's target is not
    a read)."""
    read: set[str] = set()
    targets: set[int] = set()

    class Visit(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            targets.add(id(node.target))

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if isinstance(node.value, cst.Name) and node.value.value == "self" \
                    and id(node) not in targets:
                read.add(node.attr.value)

    cls.visit(Visit())
    return read


def _by_name(ctx: Context, cls: cst.ClassDef) -> bool:
    """Does the class reach its attributes by name or walk its submodules?"""
    for call in ctx.facts.calls_in(cls):
        if dotted(call.func) in _BY_NAME:
            return True
    walked: list[bool] = []

    class Visit(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            if node.attr.value in _WALKS:
                walked.append(True)

    cls.visit(Visit())
    return bool(walked)
