"""Models trained without an optimizer the usual way: updated by hand in a loop over their
parameters; and optimizers built where nothing runs them (a factory nothing calls)."""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted

PARAMETERS = ("parameters", "named_parameters")


def never_called(facts: Facts, node: cst.CSTNode) -> bool:
    """Is `node` in a plain function (not a method) whose name no other line of the
    project reads: dead code, a factory nothing calls nor hands on?"""
    func = facts.function(node)
    if func is None or facts.enclosing_class(func) is not None:
        return False
    name = func.name.value
    return not any(n.value == name and n is not func.name for n in facts.names) and not any(
        a.attr.value == name for a in facts.attributes)


def updated_by_hand(facts: Facts) -> list[tuple[cst.Call | cst.For, cst.BaseExpression]]:
    """`for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)`: a model trained
    without an optimizer (pytorch/examples word_language_model)."""
    found: list[tuple[cst.Call | cst.For, cst.BaseExpression]] = []
    for loop in facts.for_loops:
        source = loop.iter
        if not (isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute)
                and source.func.attr.value in PARAMETERS and isinstance(loop.target, cst.Name)):
            continue
        var = loop.target.value
        if any(node.attr.value == "grad" and dotted(node.value) == var
               and facts.inside(node, loop.body) for node in facts.attributes):
            found.append((loop, source.func.value))
    return found
