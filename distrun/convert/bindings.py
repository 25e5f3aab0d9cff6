"""Which names a function binds, and its instance parameter: the scopes object_flow.py's
places live in."""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted


def self_name(facts: Facts, func: cst.FunctionDef) -> str | None:
    """The name of a method's instance parameter (`self`), None for a plain function."""
    if not isinstance(facts.parent.get(facts.parent.get(func, func)), cst.ClassDef):
        return None
    decorators = {dotted(d.decorator) for d in func.decorators}
    params = func.params.posonly_params or func.params.params
    if not params or decorators & {"staticmethod", "classmethod"}:
        return None
    return params[0].name.value


def function_locals(facts: Facts) -> dict[cst.FunctionDef, set[str]]:
    """Names each function binds itself: parameters, assignment and loop targets, minus
    those it declares global."""
    found: dict[cst.FunctionDef, set[str]] = {}
    for node in facts.names:
        if not binds(facts, node):
            continue
        func = facts.function(node)
        if func is not None:
            found.setdefault(func, set()).add(node.value)
    for func in facts.function_defs:
        names = found.setdefault(func, set())
        params = func.params
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            names.add(param.name.value)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                names.add(star.name.value)
    for statement in facts.global_statements:
        func = facts.function(statement)
        if func is not None:
            found.get(func, set()).difference_update(n.name.value for n in statement.names)
    return found


def binds(facts: Facts, name: cst.Name) -> bool:
    """Is this occurrence of a name a binding (an assignment or loop target)?"""
    node: cst.CSTNode = name
    parent = facts.parent.get(node)
    while isinstance(parent, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
        node, parent = parent, facts.parent.get(parent)
    if isinstance(parent, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
        return getattr(parent, "target", None) is node
    if isinstance(parent, (cst.For, cst.CompFor)):
        return parent.target is node
    if isinstance(parent, cst.AsName):
        return True
    return False
