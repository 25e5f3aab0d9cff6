"""Layers a model calls in `forward` whose output never reaches what training reads.

    class Decoder(nn.Module):
        def forward(self, x, h):
            weights, context = self.attn(h, x)    # `context` is never read
            out, h = self.rnn(x, h)
            return self.out(out), h, weights      # the training call drops `weights`:
                                                  # out, h, _ = decoder(x, h)

`self.attn` is called at every step, yet no loss depends on it: its parameters get no
gradient, and DDP stops every rank at the second step as for a layer never called. The
analysis follows `forward`'s local names backwards from what it returns (only the
positions of a returned tuple that some training call keeps: `a, b, _ = model(x)`,
`model(x)[0]`) and from every statement that is not a plain assignment of names (an
`if`'s test, a call for its effect, an attribute set: all kept, so it only errs toward
"used"). A layer read only in statements no kept value depends on is dead there; the
layers that other methods of the class read count as used.
"""

from __future__ import annotations

import libcst as cst

_Reads = tuple[set[str], set[str]]  # (local names read, attributes of self read)


def live_attributes(forward: cst.FunctionDef, kept: set[int] | None) -> set[str]:
    """The attributes of `self` that `forward` reads in statements its kept outputs (the
    positions `kept` of a returned tuple; every output when None) depend on."""
    assigns: list[tuple[set[str], _Reads]] = []
    roots: list[_Reads] = []
    _statements(forward.body, kept, assigns, roots)
    live_names: set[str] = set()
    attrs: set[str] = set()
    for names, read in roots:
        live_names |= names
        attrs |= read
    changed = True
    while changed:
        changed = False
        for targets, (names, read) in assigns:
            if targets & live_names and not (names <= live_names and read <= attrs):
                live_names |= names
                attrs |= read
                changed = True
    return attrs


def _statements(block: cst.BaseSuite, kept: set[int] | None,
                assigns: list[tuple[set[str], _Reads]], roots: list[_Reads]) -> None:
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                _small(small, kept, assigns, roots)
        elif isinstance(statement, cst.SimpleStatementSuite):
            for small in statement.body:
                _small(small, kept, assigns, roots)
        elif isinstance(statement, cst.BaseCompoundStatement):
            for part in _headers(statement):
                roots.append(_reads(part))
            for suite in _suites(statement):
                _statements(suite, kept, assigns, roots)
        else:
            roots.append(_reads(statement))


def _small(small: cst.BaseSmallStatement, kept: set[int] | None,
           assigns: list[tuple[set[str], _Reads]], roots: list[_Reads]) -> None:
    if isinstance(small, cst.Assign) and all(_names(t.target) is not None
                                             for t in small.targets):
        targets = set().union(*(_names(t.target) or set() for t in small.targets))
        assigns.append((targets, _reads(small.value)))
    elif isinstance(small, (cst.AnnAssign, cst.AugAssign)) and isinstance(
            small.target, cst.Name) and small.value is not None:
        names, attrs = _reads(small.value)
        if isinstance(small, cst.AugAssign):
            names = names | {small.target.value}
        assigns.append(({small.target.value}, (names, attrs)))
    elif isinstance(small, cst.Return) and small.value is not None:
        value = small.value
        if kept is not None and isinstance(value, cst.Tuple):
            for position, element in enumerate(value.elements):
                if position in kept or isinstance(element, cst.StarredElement):
                    roots.append(_reads(element))
        else:
            roots.append(_reads(value))
    else:
        roots.append(_reads(small))


def _names(target: cst.BaseExpression) -> set[str] | None:
    """The names a target binds, if it binds only names (`a`, `a, (b, c)`, `*rest`)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        found: set[str] = set()
        for element in target.elements:
            inner = element.value
            names = _names(inner)
            if names is None:
                return None
            found |= names
        return found
    return None


def _headers(statement: cst.BaseCompoundStatement) -> list[cst.CSTNode]:
    """The expressions a compound statement evaluates itself (kept: conservative)."""
    if isinstance(statement, (cst.If, cst.While)):
        parts: list[cst.CSTNode] = [statement.test]
        orelse = statement.orelse
        while isinstance(orelse, cst.If):
            parts.append(orelse.test)
            orelse = orelse.orelse
        return parts
    if isinstance(statement, cst.For):
        return [statement.target, statement.iter]
    if isinstance(statement, cst.With):
        return list(statement.items)
    if isinstance(statement, cst.Try):
        return list(statement.handlers)
    return [statement]  # a nested def or class, a match: everything it reads is kept


def _suites(statement: cst.BaseCompoundStatement) -> list[cst.BaseSuite]:
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or not hasattr(
            statement, "body"):
        return []
    suites: list[cst.BaseSuite] = [statement.body]
    orelse = getattr(statement, "orelse", None)
    while orelse is not None:
        suites.append(orelse.body)
        orelse = orelse.orelse if isinstance(orelse, cst.If) else None
    if isinstance(statement, cst.Try):
        suites += [h.body for h in statement.handlers]
        suites += [s.body for s in (statement.finalbody,) if s is not None]
    return suites


def _reads(node: cst.CSTNode) -> _Reads:
    names: set[str] = set()
    attrs: set[str] = set()

    class Visit(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            names.add(name.value)

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            if isinstance(attribute.value, cst.Name) and attribute.value.value == "self":
                attrs.add(attribute.attr.value)
                names.add("self")
                return False
            return True

    node.visit(Visit())
    return names, attrs


def kept_positions(calls: list[cst.Call], parent: dict[cst.CSTNode, cst.CSTNode]) -> set[
        int] | None:
    """The positions of a model's returned tuple that its training calls keep: every
    position unless each call unpacks it with `_`-named targets or takes `[i]`."""
    if not calls:
        return None
    kept: set[int] = set()
    for call in calls:
        holder = parent.get(call)
        if isinstance(holder, cst.Subscript) and len(holder.slice) == 1 and isinstance(
                holder.slice[0].slice, cst.Index) and isinstance(
                holder.slice[0].slice.value, cst.Integer):
            kept.add(int(holder.slice[0].slice.value.value))
            continue
        if not isinstance(holder, cst.Assign) or len(holder.targets) != 1:
            return None
        target = holder.targets[0].target
        if not isinstance(target, (cst.Tuple, cst.List)):
            return None
        for position, element in enumerate(target.elements):
            if isinstance(element, cst.StarredElement):
                return None
            if not (isinstance(element.value, cst.Name) and element.value.value.startswith("_")):
                kept.add(position)
    return kept
