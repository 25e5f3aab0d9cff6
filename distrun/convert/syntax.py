"""Small questions about one syntax node, with no context needed: its dotted name, a
call's keyword or positional arguments, a string literal's value, a block's statements.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst


def dotted(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names and attributes, also through an entry of a dict read
    with a literal key that is a name (`loaders['train']`, `self.nets["G"].fc`: written
    with single quotes, whatever the source's), else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base is not None else None
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(
            expr.slice[0].slice, cst.Index):
        key = string_value(expr.slice[0].slice.value)
        base = dotted(expr.value)
        if key is not None and key.isidentifier() and base is not None:
            return f"{base}['{key}']"
    return None


def string_value(expr: cst.BaseExpression) -> str | None:
    """The value of a plain (non f-) string literal, else None."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def block_body(node: cst.CSTNode) -> Sequence[cst.BaseStatement]:
    """The statements of a compound statement's indented block ([] for a one-line suite)."""
    body = getattr(node, "body", None)
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    if isinstance(node, cst.Module):
        return list(node.body)
    return []


def walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node` and every node below it, in source order."""
    found = [node]
    for child in node.children:
        found += walk(child)
    return found


def target_names(target: cst.BaseExpression) -> set[str]:
    """The names an assignment target binds (`a`, `a, (b, *c)`), not attributes or items."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in target_names(e.value)}
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()
