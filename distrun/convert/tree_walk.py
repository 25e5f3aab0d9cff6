"""The single walk over a module's tree that fills `Facts` (see analysis.py): parents,
imports (relative ones resolved in the module's package), definitions, the main guard,
calls, loops, returns, assignments and every name each module binds."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.syntax import dotted, string_value


@dataclass
class ModuleInfo:
    """One file: its tree and what is defined and imported at its top."""

    name: str  # dotted module name as imports spell it: "train", "utils", "models.resnet"
    path: str  # the file, as reports name it
    module: cst.Module
    is_entry: bool = True
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    star_imports: list[str] = field(default_factory=list)  # modules of `from X import *`
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)
    main_guard: cst.If | None = None
    import_statements: list[cst.SimpleStatementLine] = field(default_factory=list)
    bound_names: frozenset[str] = frozenset()
    calls: list[cst.Call] = field(default_factory=list)  # in source order
    call_starts: list[tuple[int, int]] = field(default_factory=list)

    @property
    def package(self) -> str:
        """The package relative imports start from ("" for a top-level module)."""
        is_package = self.path.replace("\\", "/").endswith("/__init__.py")
        return self.name if is_package else self.name.rpartition(".")[0]


@dataclass
class NodeIndex:
    """The nodes of every module, by kind, in source order, and each node's parent."""

    parent: dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict)
    calls: list[cst.Call] = field(default_factory=list)
    for_loops: list[cst.For] = field(default_factory=list)
    returns: list[cst.Return] = field(default_factory=list)
    assigns: list[cst.Assign | cst.AnnAssign] = field(default_factory=list)
    global_statements: list[cst.Global] = field(default_factory=list)
    function_defs: list[cst.FunctionDef] = field(default_factory=list)  # at any depth
    attributes: list[cst.Attribute] = field(default_factory=list)
    names: list[cst.Name] = field(default_factory=list)
    strings: list[cst.SimpleString] = field(default_factory=list)
    preorder: list[cst.CSTNode] = field(default_factory=list)  # every node, modules in turn


class Walker(cst.CSTVisitor):
    """Fills `facts` (the project's node index) and `info` (one module) in one walk."""

    def __init__(self, facts: NodeIndex, info: ModuleInfo) -> None:
        self.facts = facts
        self.info = info
        self.stack: list[cst.CSTNode] = []
        self.bound: set[str] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.facts.parent[node] = self.stack[-1]
        self.stack.append(node)
        self.facts.preorder.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
        super().on_leave(original_node)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.info.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.info.imports[head] = head
        self._note_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        base = _import_base(node, self.info)
        if base is not None and isinstance(node.names, cst.ImportStar):
            self.info.star_imports.append(base)
        elif base is not None and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                name = dotted(alias.name) or ""
                local = name
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                self.info.imports[local] = f"{base}.{name}" if base else name
        self._note_import(node)

    def _note_import(self, node: cst.CSTNode) -> None:
        line = self.facts.parent.get(node)
        if isinstance(line, cst.SimpleStatementLine) and self.facts.parent.get(
                line) is self.info.module:
            self.info.import_statements.append(line)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.facts.function_defs.append(node)
        self.bound.add(node.name.value)
        if self.facts.parent.get(node) is self.info.module:
            self.info.functions[node.name.value] = node
        elif self._module_level(node):  # a def in a top-level loop or `if`: a global too
            self.info.functions.setdefault(node.name.value, node)
        for param in [*node.params.params, *node.params.posonly_params, *node.params.kwonly_params]:
            self.bound.add(param.name.value)

    def _module_level(self, node: cst.CSTNode) -> bool:
        """Is `node` in no function or class (only in top-level blocks)?"""
        up = self.facts.parent.get(node)
        while up is not None and up is not self.info.module:
            if isinstance(up, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            up = self.facts.parent.get(up)
        return up is self.info.module

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound.add(node.name.value)
        if self.facts.parent.get(node) is self.info.module:
            self.info.classes[node.name.value] = node

    def visit_If(self, node: cst.If) -> None:
        if self.facts.parent.get(node) is self.info.module and _is_main_test(node.test):
            self.info.main_guard = node

    def visit_Call(self, node: cst.Call) -> None:
        self.facts.calls.append(node)
        self.info.calls.append(node)

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
        if node.value is not None:
            self.facts.assigns.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.facts.assigns.append(node)

    def visit_Global(self, node: cst.Global) -> None:
        self.facts.global_statements.append(node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        _bind(self.bound, node.target)

    def visit_For_target(self, node: cst.For) -> None:
        _bind(self.bound, node.target)


def _import_base(node: cst.ImportFrom, info: ModuleInfo) -> str | None:
    """The module `from X import ...` reads, relative imports resolved in `info`'s
    package; None when it cannot be named (too many dots)."""
    module = dotted(node.module) if node.module is not None else ""
    if module is None:
        return None
    if not node.relative:
        return module
    parts = info.package.split(".") if info.package else []
    up = len(node.relative) - 1
    if up > len(parts):
        return None
    base = ".".join(parts[: len(parts) - up] if up else parts)
    return ".".join(p for p in (base, module) if p)


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
