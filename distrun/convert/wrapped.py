"""The wrapped model: where it is wrapped, and every expression that then denotes it.

The model transform records a `WrappedModel` per wrap and follows it into the
functions, methods and classes it is passed to; later transforms (mixed precision,
gradient accumulation, sharded evaluation, checkpoints) ask for its references, which
are computed once per model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.analysis import Facts, dotted


@dataclass
class WrappedModel:
    """Where a model is wrapped, and every place that sees the wrapped object."""

    code: str  # "model" or "self.model"
    scope: cst.CSTNode  # the function (or module) where the wrap is inserted
    from_line: int  # references in `scope` at or after this line see the wrapper
    cls: cst.ClassDef | None = None
    params: list[tuple[cst.FunctionDef, str]] = field(default_factory=list)
    class_attrs: list[tuple[cst.ClassDef, str]] = field(default_factory=list)
    _refs: list[cst.CSTNode] | None = field(default=None, repr=False)

    def references(self, facts: Facts) -> list[cst.CSTNode]:
        """Every expression that denotes the wrapped model (once `params` and
        `class_attrs` are complete: the model transform fills them first)."""
        if self._refs is None:
            self._refs = _references(facts, self)
        return self._refs


def reference_ids(facts: Facts, models: list[WrappedModel]) -> set[int]:
    """ids of every expression that denotes one of `models`."""
    return {id(r) for m in models for r in m.references(facts)}


def _references(facts: Facts, model: WrappedModel) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    candidates: list[cst.Name | cst.Attribute] = [*facts.names, *facts.attributes]
    for node in candidates:
        code = dotted(node)
        if code is None:
            continue
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is not node:
            continue  # `x.model`: the attribute name, not a reference
        if isinstance(parent, (cst.AssignTarget, cst.Param)):
            continue
        if _denotes(facts, model, node, code):
            found.append(node)
    return found


def _denotes(facts: Facts, model: WrappedModel, node: cst.CSTNode, code: str) -> bool:
    scope = facts.scope(node)
    if code == model.code:
        if model.cls is not None and code.startswith("self."):
            if facts.enclosing_class(node) is not model.cls:
                return False
            return scope is not model.scope or facts.line(node) >= model.from_line
        if scope is model.scope and facts.line(node) >= model.from_line:
            return True
    for func, param in model.params:
        if scope is func and code == param:
            return True
    for cls, attr in model.class_attrs:
        if code == attr and facts.enclosing_class(node) is cls:
            return True
    return code in _instance_codes(facts, model, scope)


def _instance_codes(facts: Facts, model: WrappedModel, scope: cst.CSTNode) -> set[str]:
    """`trainer.model` where `trainer = Trainer(...)` and the class wraps `self.model`."""
    attrs = [model.code] if model.cls is not None and model.code.startswith("self.") else []
    attrs += [a for _, a in model.class_attrs if a.startswith("self.")]
    classes = {c.name.value for c in [model.cls, *(c for c, _ in model.class_attrs)] if c}
    if not attrs or not classes:
        return set()
    codes = set()
    for call in facts.calls:
        parent = facts.parent.get(call)
        if (isinstance(call.func, cst.Name) and call.func.value in classes
                and isinstance(parent, cst.Assign) and facts.scope(call) is scope):
            for target in parent.targets:
                if (instance := dotted(target.target)) is not None:
                    codes |= {f"{instance}.{a.removeprefix('self.')}" for a in attrs}
    return codes
