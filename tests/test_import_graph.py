"""distrun's parts depend on each other one way only: `config` on `launch` (its exports
build launch commands), both on `launch_rules`, and `launch_rules` on nothing of
distrun's, nor on yaml or torch. Read from the source (every import, also those inside
functions), and checked once for real in fresh interpreters with the other side blocked.

Module by module, no import cycle either: no module imports, directly or through others,
a module that imports it back (a package's `__init__` is a module of its own)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "distrun"


def part_of(module: str) -> str | None:
    """The part of distrun a module belongs to: distrun.config.load -> config."""
    parts = module.split(".")
    if parts[0] != "distrun" or len(parts) < 2:
        return None
    return parts[1]


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, wherever the import statement is."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def part_graph() -> dict[str, set[str]]:
    """part -> the other parts it imports."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        source = part_of(module)
        if source is None:
            continue
        targets = {part_of(m) for m in imports_of(path)} - {None, source}
        graph.setdefault(source, set()).update(t for t in targets if t is not None)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph, if it has one."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def module_graph() -> dict[str, set[str]]:
    """distrun module -> the distrun modules it imports (every import statement, also
    those inside functions; `from a import b` is an import of a.b when b is a module)."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}

    def resolve(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(resolve(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else resolve(base)
                             for a in node.names)
        graph[module] = {m for m in found if m is not None and m != module}
    return graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cycles(graph: dict[str, set[str]], limit: int = 1000) -> list[tuple[str, ...]]:
    """Every elementary cycle of the graph (up to `limit`), each once, starting at its
    smallest module: ("a", "b") is a -> b -> a."""
    found: list[tuple[str, ...]] = []

    def walk(start: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if len(found) >= limit:
                return
            if nxt == start:
                found.append(tuple(path))
            elif nxt > start and nxt not in path:
                walk(start, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return found


def test_no_module_of_distrun_imports_itself_back() -> None:
    found = cycles(module_graph())
    shown = "\n".join(f"  {' -> '.join([*c, c[0]])}" for c in found)
    assert not found, f"{len(found)} import cycle(s):\n{shown}"


def test_the_cycle_finder_finds_every_cycle() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"a", "d"}, "d": {"d", "c"}, "e": {"a"}}
    assert cycles(graph) == [("a", "b"), ("a", "b", "c"), ("c", "d"), ("d",)]


def test_the_parts_of_distrun_import_each_other_one_way_only() -> None:
    graph = part_graph()
    assert cycle(graph) is None, f"import cycle: {' -> '.join(cycle(graph) or [])}"
    assert "config" not in graph.get("launch", set()), graph["launch"]
    assert graph.get("launch_rules", set()) == set(), graph["launch_rules"]


def test_the_rules_import_no_heavy_module() -> None:
    heavy = {m.split(".")[0] for m in imports_of(PACKAGE / "launch_rules.py")}
    assert not heavy & {"yaml", "torch", "libcst", "click"}, heavy


BLOCKED = """\
import sys
for name in sys.argv[2:]:
    sys.modules[name] = None  # importing it now fails
import importlib
importlib.import_module(sys.argv[1])
print("imported", sys.argv[1])
"""


def test_launch_imports_without_config_and_the_rules_without_either() -> None:
    for module, blocked in (
            ("distrun.launch.resolve", ["distrun.config", "yaml"]),
            ("distrun.launch.runner", ["distrun.config", "yaml"]),
            ("distrun.launch_rules", ["distrun.config", "distrun.launch", "yaml", "torch"])):
        run = subprocess.run([sys.executable, "-c", BLOCKED, module, *blocked],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-2000:]
        assert f"imported {module}" in run.stdout
