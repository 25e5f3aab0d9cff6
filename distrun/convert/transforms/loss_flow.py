"""What a loss is made of (shared by the loss transform's parts): the calls and names
that add up to a value, a function's returned value followed back through its
assignments, and whether a sum is divided afterwards.

Only arithmetic carries a value into a loss: `loss = ce + beta * robust` is made of `ce`
and `robust`, while the arguments of a call are its inputs (`criterion(model(x_adv), y)`
does not add up the adversarial attack's own loss that made `x_adv`: TRADES'
`trades_loss` computes a KL loss for the attack before the training one).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, walk


def arith(expr: cst.CSTNode) -> tuple[list[cst.Call], set[str]]:
    """The calls and names whose values `expr` adds up: through operators, conditional
    expressions and the receivers of methods (`(a + b).mean()`), not into arguments."""
    calls: list[cst.Call] = []
    names: set[str] = set()
    todo: list[cst.CSTNode] = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, cst.Call):
            calls.append(node)
            if isinstance(node.func, cst.Attribute):
                todo.append(node.func.value)
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (
                cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power)):
            todo.append(node.left)  # a divisor or an exponent is no part of the sum
        elif isinstance(node, cst.BinaryOperation):
            todo += [node.left, node.right]
        elif isinstance(node, cst.UnaryOperation):
            todo.append(node.expression)
        elif isinstance(node, cst.IfExp):
            todo += [node.body, node.orelse]
        elif isinstance(node, cst.Subscript):
            todo.append(node.value)
        elif isinstance(node, cst.Attribute) and node.attr.value in ("data", "T"):
            todo.append(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            todo += [e.value for e in node.elements]
    return calls, names


def returned_parts(facts: Facts, func: cst.FunctionDef) -> list[cst.BaseExpression]:
    """What `func` returns, and the values assigned in it to the names those add up,
    followed back to a fixed point."""
    parts: list[cst.BaseExpression] = [r.value for r in facts.returns
                                       if r.value is not None and facts.function(r) is func]
    assigns = [a for a in walk(func) if isinstance(a, (cst.Assign, cst.AugAssign))
               and facts.function(a) is func]
    seen: set[tuple[str, int]] = set()
    todo = [(name, facts.line(part)) for part in parts for name in arith(part)[1]]
    while todo:
        name, line = todo.pop()
        if (name, line) in seen:
            continue
        seen.add((name, line))
        for assign in _reaching(facts, func, assigns, name, line):
            parts.append(assign.value)
            todo += [(n, facts.line(assign)) for n in arith(assign.value)[1]]
    return parts


def _reaching(facts: Facts, func: cst.FunctionDef, assigns: list[cst.Assign | cst.AugAssign],
              name: str, line: int) -> list[cst.Assign | cst.AugAssign]:
    """The assignments of `name` in `func` that may give its value at `line`: from the
    last one made in the function's own body before it (`loss = ce + robust` replaces
    the attack's `loss` of a branch above) on."""
    found = [a for a in assigns if facts.line(a) < line and any(
        dotted(t) == name for t in ([a.target] if isinstance(a, cst.AugAssign) else [
            t.target for t in a.targets]))]
    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else ()
    plain = [a for a in found if isinstance(a, cst.Assign) and facts.statement(a) in body]
    return [a for a in found if facts.line(a) >= facts.line(plain[-1])] if plain else found


def divided(facts: Facts, call: cst.Call) -> bool:
    """Is the sum `call` gives divided afterwards (`total / num_pos`, `(1.0 / n) *
    total`, `total * (1 / n)`, or `x = total(...)` then `x /= N` or `x / N` in its
    function)? A sum divided by a count is no sum over the batch (count_divisor.py takes
    the count)."""
    child: cst.CSTNode = call
    for up in facts.ancestors(call):
        if isinstance(up, cst.BinaryOperation) and (
                isinstance(up.operator, cst.Divide) and up.left is child
                or isinstance(up.operator, cst.Multiply) and _reciprocal(
                    up.right if up.left is child else up.left)):
            return True
        if isinstance(up, cst.BaseStatement):
            break
        child = up
    stmt = facts.statement(call)
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
    if not isinstance(small, cst.Assign):
        return False
    names = {dotted(t.target) for t in small.targets} - {None}
    func = facts.function(call)
    for node in walk(func) if func is not None else ():
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign) \
                and dotted(node.target) in names or isinstance(node, cst.BinaryOperation) \
                and isinstance(node.operator, cst.Divide) and dotted(node.left) in names:
            return True
    return False


def _reciprocal(node: cst.BaseExpression) -> bool:
    """`1.0 / batch_size`, `(1 / n)`: one over something."""
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide) \
        and isinstance(node.left, (cst.Integer, cst.Float)) and \
        float(node.left.value) == 1.0
