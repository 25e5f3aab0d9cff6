"""A project: the entry script and the local modules it imports, converted together.

`find_modules(entry)` follows the entry's imports (at any depth, relative ones too) to
the modules that Python would load from the entry's folder (the folder of a script run
as `python ENTRY.py` is the first place it looks) and the packages under it; never
site-packages. A script that imports no local module is a project of one file. An entry
inside a package (`pkg/train.py` beside `pkg/__init__.py`) that imports its own package
by name (`from pkg.utils import load_data`: the package is installed, or its parent
folder is on PYTHONPATH) reaches it through the folder above the package, which is then
the project's top folder (`package_top`). So is a folder above the entry that the entry
adds to `sys.path` itself (`sys.path.append("../../")`, read from the entry's folder,
where its README runs it; or `os.path.join(os.path.dirname(__file__), "..")`) when
modules are found through it (`script_paths`). The entry may be a notebook (`NAME.ipynb`): its
code cells, as `notebook.py` joins them, are the entry script, whose converted text goes
to `NAME_ddp.py` beside the notebook (never into the notebook).

`convert_project(entry, options)` reads and converts them together, so that loaders,
models, optimizers, loops, saves and printing are found across files, and returns one
result per file.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from distrun.convert.options import ConvertOptions
from distrun.convert.report import ConvertResult
from distrun.convert.sys_paths import script_paths
from distrun.errors import ConvertError, InputError
from distrun.files import Script, read_script

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from distrun.convert.notebook import Script as NotebookScript

MAX_MODULES = 2000  # a folder with more local modules than this is not one training project


@dataclass(frozen=True)
class SourceFile:
    path: Path  # on disk
    rel: str  # relative to the project's root, as reports name it
    name: str  # dotted module name: "utils", "models.resnet"
    script: Script
    # a notebook entry: its script's line -> (cell, line in the cell), both from 1
    cells: Mapping[int, tuple[int, int]] | None = None
    # where the converted text is written, relative to the root, when not `rel` (a
    # notebook's NAME_ddp.py beside it)
    written: str | None = None

    @property
    def out_rel(self) -> str:
        return self.written if self.written is not None else self.rel


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

    @property
    def written(self) -> list[FileResult]:
        """The files a conversion writes: the changed ones, and a notebook entry's script
        always (to its `out_rel`, never into the notebook)."""
        return [f for f in self.files if f.result.changed or f.source.cells is not None]


def find_modules(entry: Path, root: Path | None = None, text: str | None = None
                 ) -> list[tuple[Path, str]]:
    """The entry and the local modules it imports, directly or not, entry first, each with
    its dotted module name. Modules are looked up in the entry's folder, then in `root`
    (the project's top folder, when the entry sits deeper in it), then, for an entry
    inside a package, in the folder above the package (`package_top`). `text`: the
    entry's code when it is not the file's (a notebook's cells)."""
    entry = entry.resolve()
    places = [entry.parent, *([root.resolve()] if root is not None else [])]
    above = package_top(entry)
    inside_root = root is None or above is not None and root.resolve() in (above, *above.parents)
    if above is not None and above not in places and inside_root:
        places.append(above)
    for added in script_paths(entry, text):
        if added not in places and (root is None or root.resolve() in (added, *added.parents)):
            places.append(added)
    found: dict[Path, str] = {entry: entry.stem}
    todo: list[tuple[Path, str, list[str] | None]] = [(entry, "", None)]
    by_name: set[str] = set()  # modules named in strings, for importlib
    while todo:
        path, package, names = todo.pop()
        if names is None:
            names = _imported_names(path, package, text if path == entry else None)
        for name in names:
            for base in places:
                modules = _files_of(base, name)
                for module in modules:
                    if module in found:
                        continue
                    if len(found) >= MAX_MODULES:
                        raise InputError(f"{entry}: imports more than {MAX_MODULES} local "
                                         "modules: not a training project")
                    if base.resolve() not in module.parents:
                        link = base.joinpath(*name.split(".")).with_suffix(".py")
                        raise InputError(
                            f"{link if link.is_symlink() else module}: a link to {module}, outside "
                            f"the project's folder {base}: distrun converts the files of "
                            "one folder", "copy the module into the folder (or give --root "
                            "a folder that holds both)")
                    found[module] = _module_name(base, module)
                    todo.append((module, _package_of(base, module), None))
                if modules:
                    break  # found where Python looks first
        if not todo and _imports_by_name(found, entry, text):
            named = {n for module in found for n in _module_strings(
                module, text if module == entry else None)} - by_name
            by_name |= named
            if named:
                todo.append((entry, "", sorted(named)))
    return list(found.items())


def package_top(entry: Path) -> Path | None:
    """For an entry inside a package (its folder holds an `__init__.py`), the folder above
    the outermost package around it: where `import pkg.utils` finds the package when it
    is installed or that folder is on PYTHONPATH. None for an entry outside a package."""
    folder = entry.resolve().parent
    if not (folder / "__init__.py").is_file():
        return None
    while (folder.parent / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder.parent


def project_top(entry: Path, root: str | None = None,
                found: list[tuple[Path, str]] | None = None) -> Path:
    """The project's top folder, the one its copy is made of: `root` (--root), else the
    folder above the entry's package when the entry imports its own package by name
    (`from pkg.utils import ...` run from inside pkg/), else the entry's folder. `found`:
    `find_modules`' answer, when known. InputError for an entry outside `root`."""
    if root is not None:
        top = Path(root).resolve()
        if top not in entry.resolve().parents:
            raise InputError(f"--root {root}: {entry} is not inside it",
                             "give the folder that holds the script and its packages")
        return top
    top = entry.resolve().parent
    above = package_top(entry)
    added = [folder for folder in script_paths(entry) if folder != top]
    if above is None and not added:
        return top
    found = found if found is not None else find_modules(entry)
    if above is not None and own_package_imports(entry, found):
        return above
    # the highest folder the entry adds to sys.path through which a module was found
    reached = [folder for folder in added if any(
        top not in path.parents and folder in path.parents for path, _ in found[1:])]
    return max(reached, key=lambda folder: len(entry.resolve().parents) - len(
        folder.parents), default=top)


def own_package_imports(entry: Path, found: list[tuple[Path, str]]) -> list[str]:
    """The modules of `found` (`find_modules`) that the entry's own package holds and that
    are imported by the package's name (`pkg.utils` for an entry in pkg/): reached
    through the folder above the package, never the entry's folder."""
    above = package_top(entry)
    if above is None:
        return []
    package = entry.resolve().parent.relative_to(above).parts[0]
    return [name for _, name in found[1:] if name == package or name.startswith(f"{package}.")]


def convert_project(entry: str, options: ConvertOptions | None = None,
                    root: str | None = None) -> ProjectResult:
    """Convert ENTRY (a script, or a notebook's code cells) and the local modules it
    imports (looked up in its folder, then in `root`, then above its package). Raises
    InputError / ConvertError (naming the file) for a file that cannot be read or is not
    Python."""
    from distrun.convert import parse, with_deep_stack
    from distrun.convert.analysis import ModuleInfo
    from distrun.convert.pipeline import run

    entry_path = Path(entry)
    options = options or ConvertOptions()
    notebook = _notebook_script(entry_path) if entry.endswith(".ipynb") else None
    text = notebook.text if notebook is not None else None
    found = find_modules(entry_path, Path(root) if root is not None else None, text)
    top = project_top(entry_path, root, found)
    shown_top = (Path(os.path.relpath(top)) if top != entry_path.resolve().parent
                 else entry_path.parent)
    sources = []
    for i, (path, name) in enumerate(found):
        rel = path.relative_to(top).as_posix()
        if i == 0 and notebook is not None:
            from distrun.files import Script

            written = Path(rel).with_name(f"{path.stem}_{options.target}.py").as_posix()
            sources.append(SourceFile(path, rel, name, Script(notebook.text, "utf-8", False),
                                      notebook.where, written))
            continue
        sources.append(SourceFile(path, rel, name, read_script(str(shown_top / rel))))

    def work() -> list[ConvertResult]:
        infos = [ModuleInfo(s.name, s.rel, _parse(s, str(shown_top / s.rel), parse),
                            is_entry=i == 0) for i, s in enumerate(sources)]
        return run(infos, options, str(entry_path.parent))

    results = with_deep_stack(work, entry)
    reached = own_package_imports(entry_path, found) if root is None else []
    if reached:
        _note_own_package(results[0], sources[0], reached, top)
    if notebook is not None:
        from distrun.convert.notebook import note_commented

        note_commented(notebook, results[0])
    return ProjectResult(top, [FileResult(s, r) for s, r in zip(sources, results, strict=True)],
                         shown_top)


def _note_own_package(result: ConvertResult, entry: SourceFile, reached: list[str],
                      top: Path) -> None:
    """An info finding at the entry's first import of its own package by name: the
    project's top folder is the one above the package, and the copy runs with it first on
    the path."""
    from distrun.convert.report import Finding

    package = reached[0].split(".")[0]
    named = ", ".join([n for n in reached if n != package] or reached)
    line = 1
    try:
        tree = ast.parse(entry.script.text)
    except (SyntaxError, ValueError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        if any(n == package or n.startswith(f"{package}.") for n in names):
            assert isinstance(node, (ast.Import, ast.ImportFrom))
            line = node.lineno
            break
    result.findings.append(Finding(
        line, "project.own_package", "info",
        f"`{named}`: the entry's own package `{package}`, imported by its name "
        f"through the folder above it ({top.name}/, where an install or PYTHONPATH finds it): "
        f"converted with the entry; the project's top folder is {top.name}/",
        f"run the converted entry with the copy first on the path (PYTHONPATH=<copy>), or "
        f"convert --in-place: an installed `{package}` would be the unconverted one"))


def _notebook_script(path: Path) -> NotebookScript:
    from distrun.convert.notebook import script_from_notebook

    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from None
    notebook = script_from_notebook(data, str(path))
    if not notebook.text.strip():
        raise InputError(f"{path}: no code cells: nothing to convert")
    return notebook


def _parse(source: SourceFile, name: str, parse: Callable[[str, str], Any]) -> Any:
    """The tree of `source`; a notebook's syntax error is named by its cell and line."""
    if source.cells is None:
        return parse(source.script.text, name)
    from distrun.convert.notebook import at_cell

    try:
        return parse(source.script.text, name)
    except ConvertError as err:
        raise at_cell(err, name, source.cells) from None


def _imported_names(path: Path, package: str, text: str | None = None) -> list[str]:
    """Dotted names of the modules `path` imports (relative ones resolved in `package`),
    with the submodules a `from X import a, b` may name. `text`: its code, when it is not
    the file's."""
    try:
        tree = ast.parse(text if text is not None else path.read_bytes())
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


_FILE_ENDINGS = frozenset({"pt", "pth", "ckpt", "bin", "yaml", "yml", "json", "csv", "tsv",
                           "txt", "py", "pkl", "pickle", "npy", "npz", "h5", "log", "png",
                           "jpg", "jpeg", "tar", "gz", "zip", "md", "cfg", "ini", "toml"})
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _imports_by_name(found: dict[Path, str], entry: Path, text: str | None) -> bool:
    """Does a module of the project import modules by name (`importlib.import_module`,
    `__import__`)?"""
    for module in found:
        try:
            code = text if module == entry and text is not None else module.read_text(
                errors="replace")
        except OSError:
            continue
        if "import_module(" in code or "__import__(" in code:
            return True
    return False


def _module_strings(path: Path, text: str | None = None) -> list[str]:
    """Strings of `path` written like a dotted module name (`"pkg.model.two_tower"`, a
    table of the modules importlib loads by name), file names left out."""
    try:
        tree = ast.parse(text if text is not None else path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return []
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and _DOTTED.fullmatch(node.value)
            and node.value.rpartition(".")[2].lower() not in _FILE_ENDINGS]


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
