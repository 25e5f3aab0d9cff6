"""Objects passed by keyword into `**kwargs`: what a function reads as
`kwargs["model"]` (or `.get`, `.pop`) is what its callers pass as `model=net`, also
through `**{"model": net}`, `**dict(model=net)` or a name bound to one of those, and
through `super().__init__(**kwargs)`; and a function that copies its keywords onto its
instance (`self.__dict__.update(kwargs)`,
`for k, v in kwargs.items(): setattr(self, k, v)`) gives `self.model` the caller's `net`.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.syntax import string_value

_READS = frozenset({"get", "pop", "setdefault"})


def star_kwargs(func: cst.FunctionDef | None) -> str | None:
    """The name of a function's `**kwargs` parameter, if it has one."""
    star = func.params.star_kwarg if func is not None else None
    return star.name.value if isinstance(star, cst.Param) else None


def keyword_read(facts: Facts, expr: cst.BaseExpression) -> str | None:
    """`kwargs["model"]`, `kwargs.get("model")`, `kwargs.pop("model", None)` where
    `kwargs` is the `**` parameter of the function around: the keyword read ("model")."""
    star = star_kwargs(facts.function(expr))
    if star is None:
        return None
    key: cst.BaseExpression | None = None
    if isinstance(expr, cst.Subscript) and dotted(expr.value) == star \
            and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
    elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in _READS and dotted(expr.func.value) == star \
            and expr.args and expr.args[0].keyword is None:
        key = expr.args[0].value
    value = string_value(key) if key is not None else None
    return value if value is not None and value.isidentifier() else None


def keywords_passed(facts: Facts, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
    """The keywords `call` passes and their values: `f(model=net)`, and those of a
    `**` argument whose keys can be read (a dict display, `dict(...)`, or a name of the
    same function bound once to one of those)."""
    found: list[tuple[str, cst.BaseExpression]] = []
    for arg in call.args:
        if arg.keyword is not None:
            found.append((arg.keyword.value, arg.value))
        elif arg.star == "**":
            found += _dict_items(facts, arg.value, call)
    return found


def _dict_items(facts: Facts, value: cst.BaseExpression, near: cst.CSTNode
                ) -> list[tuple[str, cst.BaseExpression]]:
    if isinstance(value, cst.Name):
        bound = [a for a in facts.assigns if isinstance(a, cst.Assign)
                 and facts.scope(a) is facts.scope(near)
                 and any(dotted(t.target) == value.value for t in a.targets)]
        return _dict_items(facts, bound[0].value, near) if len(bound) == 1 \
            and not isinstance(bound[0].value, cst.Name) else []
    if isinstance(value, cst.Dict):
        return [(key, e.value) for e in value.elements if isinstance(e, cst.DictElement)
                and (key := string_value(e.key)) is not None and key.isidentifier()]
    if isinstance(value, cst.Call) and facts.call_name(value) == "dict":
        return [(a.keyword.value, a.value) for a in value.args if a.keyword is not None]
    return []


def spread_onto_self(facts: Facts, func: cst.FunctionDef) -> cst.Call | None:
    """The call by which the method `func` copies its `**kwargs` onto its instance:
    `self.__dict__.update(kwargs)`, or `setattr(self, k, v)` in `for k, v in
    kwargs.items()`; None if it does not."""
    star = star_kwargs(func)
    if star is None:
        return None
    for call in facts.calls_in(func):
        name = facts.call_name(call) or ""
        if name == "self.__dict__.update" and call.args and dotted(call.args[0].value) == star:
            return call
        if name == "setattr" and call.args and dotted(call.args[0].value) == "self" and any(
                isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call)
                and facts.call_name(loop.iter) == f"{star}.items"
                for loop in facts.enclosing_loops(call)):
            return call
    return None


def forwarded(facts: Facts, call: cst.Call, func: cst.FunctionDef, is_method: bool
              ) -> list[str]:
    """`super().__init__(**kwargs)` (a call of `func`) in a function given `**kwargs`:
    the parameters of `func` that the outer function's callers fill by keyword."""
    star = star_kwargs(facts.function(call))
    if star is None or not any(a.star == "**" and dotted(a.value) == star for a in call.args):
        return []
    return [*facts.params(func, is_method), *(p.name.value for p in func.params.kwonly_params)]
