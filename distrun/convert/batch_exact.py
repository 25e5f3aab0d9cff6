"""When gathering the batches a loss function is given gives the single process's loss
(the batch_loss transform rewrites only then).

Exact when the function (and the project's functions it calls):
  - reads nothing but what it is given, the modules it imports, builtins, constants and
    the settings of its object (`self.temperature`, a criterion built with constants):
    the sizes it uses come from the tensors it is given (`z1.shape[0]`), never from a
    batch size set elsewhere (`self.batch_size`, `args.batch_size`, a mask built for it);
  - calls nothing it is given (a model runs outside the loss);
  - sums with no `reduction="sum"` (the loss transform would scale it once more).
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from distrun.convert.analysis import Facts, ModuleInfo, dotted
from distrun.convert.context import Context
from distrun.convert.syntax import target_names
from distrun.convert.transforms.loss import sums_in

_DEPTH = 3
_BUILTINS = frozenset(dir(builtins))
_HYPER = re.compile(r"temp|tau|margin|scale|eps|alpha|beta|lambd|gamma|coef|weight",
                    re.IGNORECASE)
_BATCHY = re.compile(r"batch|size|^n$|num|count|mask|label|target|world|rank|len|queue|bank",
                     re.IGNORECASE)


def inexact(ctx: Context, func: cst.FunctionDef, depth: int, seen: set[int]) -> str | None:
    """Why gathering the batches `func` is given does not give the single process's loss
    (None: it does)."""
    facts, name = ctx.facts, func.name.value
    if id(func) in seen:
        return None
    seen.add(id(func))
    if isinstance(func.params.star_arg, cst.Param) or func.params.star_kwarg is not None:
        return f"`{name}` takes *args or **kwargs"
    cls = class_of(facts, func)
    params = [p.name.value for p in [*func.params.posonly_params, *func.params.params]]
    uses = _Uses(params[0] if cls is not None and params else None)
    func.visit(uses)
    info = facts.module_of(func)
    called = sorted(uses.called & set(params))
    if called:
        return f"`{name}` calls `{called[0]}`, which it is given (a model runs outside the loss)"
    for free in sorted(set(uses.reads) - uses.bound):
        if free in _BUILTINS or free in info.imports:
            continue
        inner = info.functions.get(free)
        if inner is not None and depth < _DEPTH:
            reason = inexact(ctx, inner, depth + 1, seen)
            if reason is None:
                continue
            return reason
        if inner is None and _module_constant(facts, info, free):
            continue
        return (f"`{name}` reads `{free}` from outside (the sizes it uses must come from "
                "the tensors it is given)")
    for attr in sorted(uses.attrs):
        method = ctx.flow.method(cls, attr) if cls is not None else None
        if method is not None and depth < _DEPTH:
            reason = inexact(ctx, method, depth + 1, seen)
            if reason is not None:
                return reason
        elif method is None and cls is not None and not _hyperparameter(ctx, cls, attr):
            return (f"`{name}` reads `self.{attr}`, which may hold a batch size or a batch "
                    "of its own")
    summed = sums_in(ctx, func, 0)
    if summed is not None:
        return (f"`{name}` sums with `{facts.code(summed)}` (the loss transform scales such "
                "a loss by the number of ranks)")
    return None


class _Uses(cst.CSTVisitor):
    """The names a function reads and binds, the attributes of its instance it reads,
    and the names it calls."""

    def __init__(self, self_name: str | None) -> None:
        self.self_name = self_name
        self.reads: list[str] = []
        self.bound: set[str] = set()
        self.attrs: set[str] = set()
        self.called: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if isinstance(node.value, cst.Name) and node.value.value == self.self_name:
            self.attrs.add(node.attr.value)
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name):
            self.called.add(node.func.value)

    def visit_Name(self, node: cst.Name) -> None:
        self.reads.append(node.value)

    def visit_Param(self, node: cst.Param) -> None:
        self.bound.add(node.name.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound.add(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.bound |= target_names(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.bound |= target_names(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.bound |= target_names(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.bound |= target_names(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.bound |= target_names(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self.bound |= target_names(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.bound |= target_names(node.target)


def _constant(facts: Facts, value: cst.BaseExpression, func: cst.FunctionDef | None) -> bool:
    """Does `value` read nothing but imports, builtins and (in `func`) parameters with a
    literal default (a temperature: `temperature=0.5`)?"""
    info = facts.module_of(value)
    literal_params = set()
    if func is not None:
        for p in [*func.params.posonly_params, *func.params.params, *func.params.kwonly_params]:
            if isinstance(p.default, (cst.BaseNumber, cst.BaseString)) or (
                    p.default is not None and dotted(p.default) in ("None", "True", "False")):
                literal_params.add(p.name.value)
    uses = _Uses(None)
    value.visit(uses)
    return all(r in _BUILTINS or r in info.imports or r in literal_params
               for r in uses.reads)


def _module_constant(facts: Facts, info: ModuleInfo, name: str) -> bool:
    """Is `name` a global of `info` every assignment of which is a constant?"""
    values = [a.value for a in facts.assigns if isinstance(a, cst.Assign)
              and facts.function(a) is None
              and facts.enclosing_class(a) is None and facts.module_of(a) is info
              and any(dotted(t.target) == name for t in a.targets)]
    return bool(values) and all(_constant(facts, v, None) for v in values)


def _hyperparameter(ctx: Context, cls: cst.ClassDef, attr: str) -> bool:
    """Is `self.<attr>` a setting of the loss (a temperature, a criterion, a similarity)
    rather than something that depends on the batch?"""
    if _BATCHY.search(attr):
        return False
    facts, family = ctx.facts, ctx.flow.family(cls)
    values = [(a.value, facts.function(a)) for a in facts.assigns
              if isinstance(a, cst.Assign)
              and any(dotted(t.target) == f"self.{attr}" for t in a.targets)
              and (owner := facts.enclosing_class(a)) is not None
              and ctx.flow.family(owner) is family]
    return bool(values) and all(
        _constant(facts, value, func) or _HYPER.search(attr) for value, func in values)


def class_of(facts: Facts, func: cst.FunctionDef) -> cst.ClassDef | None:
    """The class `func` is a method of (directly in its body)."""
    block = facts.parent.get(func)
    owner = facts.parent.get(block) if block is not None else None
    return owner if isinstance(owner, cst.ClassDef) else None
