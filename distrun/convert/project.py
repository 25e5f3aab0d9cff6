"""A project: the entry script and the local modules it imports, converted together.

`find_modules(entry)` follows the entry's imports (at any depth, relative ones too) to
the modules that Python would load from the entry's folder (the folder of a script run
as `python ENTRY.py` is the first place it looks) and the packages under it; never
site-packages. A script that imports no local module is a project of one file.

`convert_project(entry, options)` reads and converts them together, so that loaders,
models, optimizers, loops, saves and printing are found across files, and returns one
result per file.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

from distrun.convert.options import ConvertOptions
from distrun.convert.report import ConvertResult
from distrun.errors import ConvertError, InputError
from distrun.files import Script, read_script

MAX_MODULES = 2000  # a folder with more local modules than this is not one training project


@dataclass(frozen=True)
class SourceFile:
    path: Path  # on disk
    rel: str  # relative to the project's root, as reports name it
    name: str  # dotted module name: "utils", "models.resnet"
    script: Script


@dataclass
class FileResult:
    source: SourceFile
    result: ConvertResult


@dataclass
class ProjectResult:
    root: Path  # the project's top folder: the entry's, or --root
    files: list[FileResult] = field(default_factory=list)  # the entry first
    shown: Path = Path(".")  # the top folder as the user wrote it (reports name files so)

    @property
    def entry(self) -> FileResult:
        return self.files[0]

    @property
    def changed(self) -> list[FileResult]:
        return [f for f in self.files if f.result.changed]


def find_modules(entry: Path, root: Path | None = None) -> list[tuple[Path, str]]:
    """The entry and the local modules it imports, directly or not, entry first, each with
    its dotted module name. Modules are looked up in the entry's folder, then in `root`
    (the project's top folder, when the entry sits deeper in it)."""
    entry = entry.resolve()
    places = [entry.parent, *([root.resolve()] if root is not None else [])]
    found: dict[Path, str] = {entry: entry.stem}
    todo = [(entry, "")]
    while todo:
        path, package = todo.pop()
        for name in _imported_names(path, package):
            for base in places:
                modules = _files_of(base, name)
                for module in modules:
                    if module in found:
                        continue
                    if len(found) >= MAX_MODULES:
                        raise InputError(f"{entry}: imports more than {MAX_MODULES} local "
                                         "modules: not a training project")
                    found[module] = _module_name(base, module)
                    todo.append((module, _package_of(base, module)))
                if modules:
                    break  # found where Python looks first
    return list(found.items())


def convert_project(entry: str, options: ConvertOptions | None = None,
                    root: str | None = None) -> ProjectResult:
    """Convert ENTRY and the local modules it imports (looked up in its folder, then in
    `root`). Raises InputError / ConvertError (naming the file) for a file that cannot be
    read or is not Python."""
    from distrun.convert import parse, with_deep_stack
    from distrun.convert.analysis import ModuleInfo
    from distrun.convert.pipeline import run

    entry_path = Path(entry)
    top = Path(root).resolve() if root is not None else entry_path.resolve().parent
    if top not in entry_path.resolve().parents:
        raise InputError(f"--root {root}: {entry} is not inside it",
                         "give the folder that holds the script and its packages")
    shown_top = Path(os.path.relpath(top)) if root is not None else entry_path.parent
    sources = []
    for path, name in find_modules(entry_path, top if root is not None else None):
        rel = path.relative_to(top).as_posix()
        sources.append(SourceFile(path, rel, name, read_script(str(shown_top / rel))))

    def work() -> list[ConvertResult]:
        infos = [ModuleInfo(s.name, s.rel, parse(s.script.text, str(shown_top / s.rel)),
                            is_entry=i == 0) for i, s in enumerate(sources)]
        return run(infos, options or ConvertOptions(), str(entry_path.parent))

    results = with_deep_stack(work, entry)
    return ProjectResult(top, [FileResult(s, r) for s, r in zip(sources, results, strict=True)],
                         shown_top)


def _imported_names(path: Path, package: str) -> list[str]:
    """Dotted names of the modules `path` imports (relative ones resolved in `package`),
    with the submodules a `from X import a, b` may name."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return []  # read and named properly when it is converted
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            if base is None:
                continue
            if base:
                names.append(base)
            names += [f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*"]
    return names


def _absolute(module: str, level: int, package: str) -> str | None:
    if not level:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def _files_of(root: Path, name: str) -> list[Path]:
    """The files Python runs to import `name` from `root`: each package's __init__.py
    on the way, then the module itself."""
    files = []
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        base = root.joinpath(*parts[:depth])
        init, single = base / "__init__.py", base.with_suffix(".py")
        if init.is_file():
            files.append(init.resolve())
        elif single.is_file() and depth == len(parts):
            files.append(single.resolve())
        elif single.is_file():
            files.append(single.resolve())
            break  # a module, not a package: what follows are its attributes
        elif not base.is_dir():
            break  # not local (the standard library, site-packages): never followed
    return files


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(root: Path, path: Path) -> str:
    name = _module_name(root, path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


__all__ = ["ConvertError", "FileResult", "ProjectResult", "SourceFile", "convert_project",
           "find_modules"]
