"""What a script (or a project of several modules) contains, found once and shared by
every transform.

`Facts.build(modules)` walks each module's syntax tree a single time and records: how
names were imported (so `DataLoader`, `data.DataLoader` and `torch.utils.data.DataLoader`
all resolve to one qualified name, and `from utils import get_loader` to the project's
own `utils.get_loader`), the enclosing statement, function and class of every node,
module-level functions and classes, the main guard, every call and every `for` loop.
Calls resolve across the project's modules: a function defined in `utils.py` and called
from `train.py` is one function with its call sites in both. Transforms ask questions of
these facts; none re-walks the trees, and none changes them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from distrun.convert.syntax import block_body, dotted, keyword, positional, string_value, walk
from distrun.convert.tree_walk import ModuleInfo, NodeIndex, Walker

__all__ = ["Facts", "ModuleInfo", "Scope", "block_body", "dotted", "keyword", "positional",
           "string_value", "walk"]

Scope = cst.FunctionDef | cst.Module


@dataclass
class Facts(NodeIndex):
    """Built once by `Facts.build`; read-only afterwards (transforms only ask). The node
    tables (parents, calls, loops...) are those of `tree_walk.NodeIndex`."""

    modules: list[ModuleInfo] = field(default_factory=list)
    lines: dict[cst.CSTNode, int] = field(default_factory=dict)
    spans: dict[cst.CSTNode, tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=dict)
    bound_names: frozenset[str] = frozenset()  # every name any module binds
    _roots: dict[int, ModuleInfo] = field(default_factory=dict)
    _by_name: dict[str, ModuleInfo] = field(default_factory=dict)
    _owner: dict[int, ModuleInfo] = field(default_factory=dict, repr=False)
    _sites: dict[int, list[tuple[cst.Call, bool]]] | None = field(default=None, repr=False)
    _function_of: dict[int, cst.FunctionDef | None] = field(default_factory=dict, repr=False)
    _assigned: dict[tuple[int, str], list[cst.Assign]] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, module: cst.Module | Sequence[ModuleInfo]) -> Facts:
        """Facts of one script (a tree), or of a project (its modules, entry first)."""
        infos = [ModuleInfo("__main__", "<string>", module)] if isinstance(
            module, cst.Module) else list(module)
        facts = cls(modules=infos)
        bound: set[str] = set()
        for info in infos:
            wrapper = MetadataWrapper(info.module, unsafe_skip_copy=True)
            for node, pos in wrapper.resolve(PositionProvider).items():
                facts.lines[node] = pos.start.line
                facts.spans[node] = ((pos.start.line, pos.start.column),
                                     (pos.end.line, pos.end.column))
            walker = Walker(facts, info)
            info.module.visit(walker)
            info.bound_names = frozenset(walker.bound)
            info.call_starts = [facts.spans[c][0] for c in info.calls]
            bound |= walker.bound
            facts._roots[id(info.module)] = info
            facts._by_name[info.name] = info
        facts.bound_names = frozenset(bound)
        return facts

    # -- modules -------------------------------------------------------------------

    @property
    def entry(self) -> ModuleInfo:
        return self.modules[0]

    def module_of(self, node: cst.CSTNode) -> ModuleInfo:
        """The module `node` belongs to."""
        found = self._owner.get(id(node))
        if found is None:
            top = self.top_level_statement(node)
            root = self.parent.get(top, top)
            found = self._roots.get(id(root), self.entry)
            self._owner[id(node)] = found
        return found

    def local_module(self, name: str) -> ModuleInfo | None:
        return self._by_name.get(name)

    # -- lookups ---------------------------------------------------------------

    def line(self, node: cst.CSTNode) -> int:
        while node not in self.lines and node in self.parent:
            node = self.parent[node]
        return self.lines.get(node, 1)

    def qualname(self, expr: cst.BaseExpression) -> str | None:
        """Resolve `expr` through its module's imports: `nn.Linear` -> `torch.nn.Linear`."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        imports = self.module_of(expr).imports
        if head in imports:
            full = imports[head]
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
        """The innermost function around `node` (remembered for every node on the way up:
        the transforms ask it of most nodes, some many times)."""
        memo = self._function_of
        if id(node) in memo:
            return memo[id(node)]
        chain: list[cst.CSTNode] = []
        found: cst.FunctionDef | None = None
        current = node
        while current in self.parent:
            chain.append(current)
            current = self.parent[current]
            if isinstance(current, cst.FunctionDef):
                found = current
                break
            if id(current) in memo:
                found = memo[id(current)]
                break
        for link in chain:
            memo[id(link)] = found
        return found

    def nodes(self, *kinds: type[cst.CSTNode], within: cst.Module | None = None
              ) -> list[cst.CSTNode]:
        """The nodes of these kinds, in source order (one module's with `within`): read
        from the index, where a visit of the tree would walk it again."""
        return [node for node in self.preorder if isinstance(node, kinds) and (
            within is None or self.module_of(node).module is within)]

    def assigned(self, scope: Scope, name: str) -> list[cst.Assign]:
        """The plain assignments in `scope` (a function, or a module's top level) whose
        targets include the bare name `name`, in source order."""
        if self._assigned is None:
            table: dict[tuple[int, str], list[cst.Assign]] = {}
            for assign in self.assigns:
                if isinstance(assign, cst.Assign):
                    for target in assign.targets:
                        if isinstance(target.target, cst.Name):
                            table.setdefault((id(self.scope(assign)), target.target.value),
                                             []).append(assign)
            self._assigned = table
        return list(self._assigned.get((id(scope), name), []))

    def scope(self, node: cst.CSTNode) -> Scope:
        return self.function(node) or self.module_of(node).module

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.ClassDef):
                return anc
        return None

    def top_level_statement(self, node: cst.CSTNode) -> cst.CSTNode:
        """The module-level statement that holds `node` (the module itself for a module)."""
        current = node
        while current in self.parent and not isinstance(self.parent[current], cst.Module):
            current = self.parent[current]
        return current

    def in_main_guard(self, node: cst.CSTNode) -> bool:
        guard = self.module_of(node).main_guard
        return guard is not None and self.top_level_statement(node) is guard

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
        return (outer[0] <= inner[0] and inner[1] <= outer[1]
                and (len(self.modules) == 1 or self.module_of(node) is self.module_of(container)))

    def calls_in(self, container: cst.CSTNode) -> list[cst.Call]:
        """Calls inside `container`, in source order (calls are collected in pre-order)."""
        info = self.module_of(container)
        span = self.spans[container]
        lo = bisect.bisect_left(info.call_starts, span[0])
        hi = bisect.bisect_right(info.call_starts, span[1])
        return [c for c in info.calls[lo:hi] if self.spans[c][1] <= span[1]]

    def method(self, cls_def: cst.ClassDef, name: str) -> cst.FunctionDef | None:
        for stmt in cls_def.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
                return stmt
        return None

    def definition(self, qualified: str, depth: int = 0
                   ) -> cst.FunctionDef | cst.ClassDef | None:
        """The project's own top-level function or class named `qualified`
        ("utils.get_loader", "models.ResNet18" through `from .resnet import *`)."""
        module_name, _, symbol = qualified.rpartition(".")
        info = self._by_name.get(module_name)
        if info is None or not symbol or depth > 4:
            return None
        found = info.functions.get(symbol) or info.classes.get(symbol)
        if found is not None:
            return found
        if symbol in info.imports and info.imports[symbol] != qualified:
            return self.definition(info.imports[symbol], depth + 1)
        for star in info.star_imports:
            found = self.definition(f"{star}.{symbol}", depth + 1)
            if found is not None:
                return found
        return None

    def callee(self, call: cst.Call) -> tuple[cst.FunctionDef, bool] | None:
        """The project's own function (or `self.method`) that `call` invokes, and
        whether it is a method (so its first parameter is `self`)."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and func.value.value == "self":
            cls_def = self.enclosing_class(call)
            found = self.method(cls_def, func.attr.value) if cls_def is not None else None
            return (found, True) if found is not None else None
        target = self.local_definition(call)
        if isinstance(target, cst.FunctionDef):
            return target, isinstance(self.parent.get(self.parent.get(target, target)),
                                      cst.ClassDef)
        if isinstance(target, cst.ClassDef):
            init = self.method(target, "__init__")
            return (init, True) if init is not None else None
        return None

    def local_definition(self, call: cst.Call) -> cst.FunctionDef | cst.ClassDef | None:
        """The project's own function or class that `call` names, if any."""
        info = self.module_of(call)
        if isinstance(call.func, cst.Name):
            name = call.func.value
            if name in info.functions or name in info.classes:
                return info.functions.get(name) or info.classes.get(name)
            for star in info.star_imports:
                found = self.definition(f"{star}.{name}")
                if found is not None:
                    return found
        if len(self.modules) == 1:
            return None
        qualified = self.call_name(call)
        return self.definition(qualified) if qualified and "." in qualified else None

    def params(self, func: cst.FunctionDef, is_method: bool) -> list[str]:
        """The parameters a call fills, in order: a method's first (`self`, `cls`) left
        out, not a static method's (`Model.train_step(model, optimizer, ...)`)."""
        names = [p.name.value for p in func.params.posonly_params] + [
            p.name.value for p in func.params.params
        ]
        return names[1:] if is_method and names and not is_static(func) else names

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
        """Every call of `func` in the project (with whether it is called as a method)."""
        if self._sites is None:
            sites: dict[int, list[tuple[cst.Call, bool]]] = {}
            for call in self.calls:
                found = self.callee(call)
                if found is not None:
                    sites.setdefault(id(found[0]), []).append((call, found[1]))
            self._sites = sites
        return list(self._sites.get(id(func), []))

    def code(self, node: cst.CSTNode) -> str:
        return self.module_of(node).module.code_for_node(node)

    def import_statements(self) -> list[cst.SimpleStatementLine]:
        """Every module's top-level import lines, each once."""
        return list(dict.fromkeys(s for info in self.modules for s in info.import_statements))

    def classes(self) -> list[cst.ClassDef]:
        return [cls for info in self.modules for cls in info.classes.values()]


def is_static(func: cst.FunctionDef) -> bool:
    """Is `func` decorated `@staticmethod` (no `self` to bind)?"""
    return any(dotted(d.decorator) == "staticmethod" for d in func.decorators)
