"""The folders above a script that its own code puts on `sys.path` (read from its text,
never run): where a project whose entry sits deeper finds its packages."""

from __future__ import annotations

import ast
from pathlib import Path


def script_paths(entry: Path, text: str | None = None) -> list[Path]:
    """The folders above the entry that its own code adds to `sys.path` (at its top level
    or in a function): `sys.path.append("../..")` / `.insert(0, ...)` with a literal
    (relative to the entry's folder), `os.path.join(os.path.dirname(__file__), "..")`,
    `os.path.dirname(os.path.abspath(__file__))` and `os.path.abspath(...)` /
    `os.path.realpath(...)` of these, also through a name assigned once (`file_dir =
    os.path.dirname(...)`, then `sys.path.append(file_dir)`: AGCRN). Folders that are
    not above the entry are left out (a sibling folder is not the project's)."""
    entry = entry.resolve()
    try:
        tree = ast.parse(text if text is not None else entry.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)
    values = {name: exprs[0] for name, exprs in assigned.items() if len(exprs) == 1}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "insert") and node.args
                and ast.unparse(node.func.value) == "sys.path"):
            continue
        folder = _path_of(node.args[-1], entry, values)
        if folder is not None and folder in entry.parents and folder not in found:
            found.append(folder)
    return found


def _path_of(expr: ast.expr, entry: Path, values: dict[str, ast.expr],
             depth: int = 0) -> Path | None:
    """The path `expr` names (`__file__` is the entry; a string is read from the entry's
    folder), or None when unknown."""
    if depth > 8:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return (entry.parent / expr.value).resolve()
    if isinstance(expr, ast.Name):
        if expr.id == "__file__":
            return entry
        value = values.get(expr.id)
        return _path_of(value, entry, values, depth + 1) if value is not None else None
    if not isinstance(expr, ast.Call) or not expr.args:
        return None
    name = ast.unparse(expr.func)
    inner = _path_of(expr.args[0], entry, values, depth + 1)
    if inner is None:
        return None
    if name in ("os.path.abspath", "os.path.realpath", "os.path.normpath") \
            and len(expr.args) == 1:
        return inner.resolve()
    if name == "os.path.dirname" and len(expr.args) == 1:
        return inner.parent
    if name == "os.path.join":
        parts = [a.value for a in expr.args[1:]
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return inner.joinpath(*parts).resolve() if len(parts) == len(expr.args) - 1 else None
    return None
