"""What a script contains, found once and shared by every transform.

`Facts.build(module)` walks the syntax tree a single time and records: how names
were imported (so `DataLoader`, `data.DataLoader` and `torch.utils.data.DataLoader`
all resolve to one qualified name), the enclosing statement, function and class of
every node, module-level functions and classes, the main guard, every call and
every `for` loop. Transforms ask questions of these facts; none re-walks the tree.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

Scope = cst.FunctionDef | cst.Module


def dotted(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base is not None else None
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


@dataclass
class Facts:
    """Built once by `Facts.build`; read-only afterwards (transforms only ask)."""

    module: cst.Module
    lines: dict[cst.CSTNode, int] = field(default_factory=dict)
    spans: dict[cst.CSTNode, tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=dict)
    parent: dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)
    calls: list[cst.Call] = field(default_factory=list)
    for_loops: list[cst.For] = field(default_factory=list)
    returns: list[cst.Return] = field(default_factory=list)
    attributes: list[cst.Attribute] = field(default_factory=list)
    names: list[cst.Name] = field(default_factory=list)
    strings: list[cst.SimpleString] = field(default_factory=list)
    bound_names: frozenset[str] = frozenset()  # every name the script binds
    main_guard: cst.If | None = None
    import_statements: list[cst.SimpleStatementLine] = field(default_factory=list)
    _call_starts: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def build(cls, module: cst.Module) -> Facts:
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        facts = cls(module=module)
        facts.lines = {node: pos.start.line for node, pos in positions.items()}
        facts.spans = {
            node: ((pos.start.line, pos.start.column), (pos.end.line, pos.end.column))
            for node, pos in positions.items()
        }
        collector = _Collector(facts)
        module.visit(collector)
        facts.bound_names = frozenset(collector.bound)
        facts._call_starts = [facts.spans[c][0] for c in facts.calls]
        return facts

    # -- lookups ---------------------------------------------------------------

    def line(self, node: cst.CSTNode) -> int:
        while node not in self.lines and node in self.parent:
            node = self.parent[node]
        return self.lines.get(node, 1)

    def qualname(self, expr: cst.BaseExpression) -> str | None:
        """Resolve `expr` through the script's imports: `nn.Linear` -> `torch.nn.Linear`."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.imports:
            full = self.imports[head]
            return f"{full}.{rest}" if rest else full
        return name

    def call_name(self, call: cst.Call) -> str | None:
        return self.qualname(call.func)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        while node in self.parent:
            node = self.parent[node]
            yield node

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The innermost statement (simple line or compound) that holds `node`."""
        current: cst.CSTNode | None = node
        while current is not None:
            if isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return current
            current = self.parent.get(current)
        return None

    def function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.FunctionDef):
                return anc
        return None

    def scope(self, node: cst.CSTNode) -> Scope:
        return self.function(node) or self.module

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.ClassDef):
                return anc
        return None

    def top_level_statement(self, node: cst.CSTNode) -> cst.CSTNode:
        """The module-level statement that holds `node`."""
        current = node
        while current in self.parent and self.parent[current] is not self.module:
            current = self.parent[current]
        return current

    def in_main_guard(self, node: cst.CSTNode) -> bool:
        return self.main_guard is not None and self.top_level_statement(node) is self.main_guard

    def enclosing_loops(self, node: cst.CSTNode) -> Iterator[cst.For | cst.While]:
        """Loops around `node`, innermost first, without leaving its function."""
        for anc in self.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return
            if isinstance(anc, (cst.For, cst.While)):
                yield anc

    def inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        outer, inner = self.spans.get(container), self.spans.get(node)
        if outer is None or inner is None:
            return node is container or any(a is container for a in self.ancestors(node))
        return outer[0] <= inner[0] and inner[1] <= outer[1]

    def calls_in(self, container: cst.CSTNode) -> list[cst.Call]:
        """Calls inside `container`, in source order (calls are collected in pre-order)."""
        span = self.spans[container]
        lo = bisect.bisect_left(self._call_starts, span[0])
        hi = bisect.bisect_right(self._call_starts, span[1])
        return [c for c in self.calls[lo:hi] if self.spans[c][1] <= span[1]]

    def method(self, cls_def: cst.ClassDef, name: str) -> cst.FunctionDef | None:
        for stmt in cls_def.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
                return stmt
        return None

    def callee(self, call: cst.Call) -> tuple[cst.FunctionDef, bool] | None:
        """The script's own function (or `self.method`) that `call` invokes, and
        whether it is a method (so its first parameter is `self`)."""
        if isinstance(call.func, cst.Name) and call.func.value in self.functions:
            return self.functions[call.func.value], False
        if isinstance(call.func, cst.Name) and call.func.value in self.classes:
            init = self.method(self.classes[call.func.value], "__init__")
            return (init, True) if init is not None else None
        if (
            isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
            and call.func.value.value == "self"
        ):
            cls_def = self.enclosing_class(call)
            if cls_def is not None:
                found = self.method(cls_def, call.func.attr.value)
                if found is not None:
                    return found, True
        return None

    def params(self, func: cst.FunctionDef, is_method: bool) -> list[str]:
        names = [p.name.value for p in func.params.posonly_params] + [
            p.name.value for p in func.params.params
        ]
        return names[1:] if is_method and names else names

    def argument_for(
        self, call: cst.Call, func: cst.FunctionDef, is_method: bool, param: str
    ) -> cst.BaseExpression | None:
        """The expression `call` passes for `param` of `func`."""
        kw = keyword(call, param)
        if kw is not None:
            return kw.value
        names = self.params(func, is_method)
        if param in names:
            index = names.index(param)
            pos = positional(call)
            if index < len(pos):
                return pos[index].value
        return None

    def param_for(
        self, call: cst.Call, func: cst.FunctionDef, is_method: bool, code: str
    ) -> str | None:
        """The parameter of `func` that receives the expression `code` at `call`."""
        names = self.params(func, is_method)
        for i, arg in enumerate(positional(call)):
            if dotted(arg.value) == code and i < len(names):
                return names[i]
        for arg in call.args:
            if arg.keyword is not None and dotted(arg.value) == code:
                return arg.keyword.value
        return None

    def call_sites(self, func: cst.FunctionDef) -> list[tuple[cst.Call, bool]]:
        return [
            (c, found[1])
            for c in self.calls
            if (found := self.callee(c)) is not None and found[0] is func
        ]

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


class _Collector(cst.CSTVisitor):
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.stack: list[cst.CSTNode] = []
        self.bound: set[str] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.facts.parent[node] = self.stack[-1]
        self.stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
        super().on_leave(original_node)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.facts.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.facts.imports[head] = head
        self._note_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            self._note_import(node)
            return
        base = dotted(node.module) or ""
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.facts.imports[local] = f"{base}.{name}"
        self._note_import(node)

    def _note_import(self, node: cst.CSTNode) -> None:
        line = self.facts.parent.get(node)
        if (
            isinstance(line, cst.SimpleStatementLine)
            and self.facts.parent.get(line) is self.facts.module
        ):
            self.facts.import_statements.append(line)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound.add(node.name.value)
        if self.facts.parent.get(node) is self.facts.module:
            self.facts.functions[node.name.value] = node
        for param in [*node.params.params, *node.params.posonly_params, *node.params.kwonly_params]:
            self.bound.add(param.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound.add(node.name.value)
        if self.facts.parent.get(node) is self.facts.module:
            self.facts.classes[node.name.value] = node

    def visit_If(self, node: cst.If) -> None:
        if self.facts.parent.get(node) is self.facts.module and _is_main_test(node.test):
            self.facts.main_guard = node

    def visit_Call(self, node: cst.Call) -> None:
        self.facts.calls.append(node)

    def visit_For(self, node: cst.For) -> None:
        self.facts.for_loops.append(node)

    def visit_Return(self, node: cst.Return) -> None:
        self.facts.returns.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.facts.attributes.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        self.facts.names.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.facts.strings.append(node)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        _bind(self.bound, node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        _bind(self.bound, node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        _bind(self.bound, node.target)

    def visit_For_target(self, node: cst.For) -> None:
        _bind(self.bound, node.target)


def _bind(names: set[str], target: cst.BaseExpression) -> None:
    if isinstance(target, cst.Name):
        names.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind(names, element.value)


def _is_main_test(test: cst.BaseExpression) -> bool:
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, right = test.left, test.comparisons[0].comparator
    values = {dotted(left) or string_value(left), dotted(right) or string_value(right)}
    return values == {"__name__", "__main__"}


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
