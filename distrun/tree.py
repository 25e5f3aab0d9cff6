"""Writing a converted project: a copy of its folder with the converted files in place.

The copy is built in a temporary folder beside the destination (named as
distrun.writes names its temporary files, so that a killed run's is removed by the
next) and renamed over it at the end, so a failure leaves nothing half-written; an
existing destination is replaced only when asked, and is then kept as DEST.orig. What is
not copied: version control and cache folders, virtual environments, files over 16 MiB
and folders without Python code holding over 64 MiB (data sets, checkpoints): they are
listed, with how to link them.

Where the copy goes (`output_folder`): `<folder>_ddp` beside the project's folder; `-o OUT`
is the copy itself, or, when OUT ends in `/`, the folder the copy `<folder>_ddp` is
written into; a file name ending in `.py` is refused, a project is not one file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from distrun.errors import InputError
from distrun.writes import new_mode, stop_point, temp_name

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", ".tox", ".nox", ".ipynb_checkpoints", "node_modules",
                       ".idea", ".vscode", ".eggs"})
BIG_FILE = 16 << 20
BIG_DATA_DIR = 64 << 20


def default_folder(root: Path, target: str) -> Path:
    """`<folder>_ddp` beside the project's folder, as the user would write it."""
    return Path(os.path.relpath(root.parent / f"{root.name}_{target}"))


def output_folder(output: str | None, root: Path, target: str, entry: str) -> Path:
    """The folder a converted project is written to (see the module's docstring);
    InputError for `-o -` and for a file name ending in `.py`."""
    if output is None:
        return default_folder(root, target)
    if output == "-" or output.endswith(".py"):
        what = "stdout" if output == "-" else output
        raise InputError(f"{entry} imports modules of its folder: a project converts to a "
                         f"folder (a copy of {root.name}/), not to one file like {what}",
                         f"give -o DIR or -o DIR/ (the copy goes inside it), or leave -o "
                         f"out: {default_folder(root, target)}")
    if output.endswith(("/", os.sep)):
        if Path(output).exists() and not Path(output).is_dir():
            raise InputError(f"{output}: not a folder", "give -o a folder")
        return Path(output) / f"{root.name}_{target}"
    return Path(output)


@dataclass
class Copied:
    """What `write_project` did."""

    out: Path
    files: int = 0
    left_out: list[tuple[str, int]] = field(default_factory=list)  # (relative path, bytes)
    backup: Path | None = None


def write_project(root: Path, out: Path, converted: Mapping[str, bytes],
                  force: bool = False) -> Copied:
    """Copy the project folder `root` to `out`, writing `converted` (relative path ->
    bytes) in place of those files. Raises InputError when `out` exists (unless
    `force`: it is then kept as OUT.orig) or cannot be written."""
    root, out = root.resolve(), out.resolve()
    if out == root or out in root.parents:
        raise InputError(f"{out}: the output folder holds the project itself",
                         "give -o a new folder beside the project, or use --in-place")
    backup = Path(f"{out}.orig")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder", "give -o another folder")
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError(f"{out} already exists", f"pass --force to replace it (the old one "
                         f"is kept as {backup.name}), or choose another -o")
    if out.exists() and force and backup.exists():
        raise InputError(f"{backup} already exists: refusing to replace an earlier backup",
                         "move it away first")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = temp_name(out.parent, out.name, suffix="")
        staging.mkdir(mode=new_mode(directory=True))
        os.chmod(staging, new_mode(directory=True))
    except OSError as err:
        raise InputError(f"{out}: cannot write: {err.strerror}") from None
    copied = Copied(out)
    try:
        _copy(root, staging, converted, copied, skip={out, staging, backup})
        stop_point("copied")
        if out.exists():
            out.rename(backup)
            copied.backup = backup
        staging.rename(out)
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(err, OSError):
            raise InputError(f"{out}: cannot write: {err.strerror or err}") from None
        raise
    return copied


def _copy(root: Path, dest: Path, converted: Mapping[str, bytes], copied: Copied,
          skip: set[Path]) -> None:
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        rel_dir = here.relative_to(root)
        kept = []
        for name in sorted(dirs):
            path = here / name
            if name in SKIP_DIRS or path in skip or (path / "pyvenv.cfg").exists():
                continue
            if path.is_symlink():
                _link(path, dest / rel_dir / name)
                continue
            size = _data_size(path)
            if size is not None:
                copied.left_out.append(((rel_dir / name).as_posix(), size))
                continue
            kept.append(name)
        dirs[:] = kept
        (dest / rel_dir).mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            source, rel = here / name, (rel_dir / name).as_posix()
            target = dest / rel_dir / name
            if rel in converted:
                target.write_bytes(converted[rel])
                shutil.copymode(source, target)
            elif source.is_symlink():
                _link(source, target)
            elif source.stat().st_size > BIG_FILE:
                copied.left_out.append((rel, source.stat().st_size))
                continue
            else:
                shutil.copy2(source, target)
            copied.files += 1


def _link(source: Path, target: Path) -> None:
    target.symlink_to(os.readlink(source))


def _data_size(folder: Path) -> int | None:
    """The size of a folder without Python code when it is over BIG_DATA_DIR, else None."""
    total = 0
    for sub, _dirs, files in os.walk(folder):
        if any(f.endswith(".py") for f in files):
            return None
        for name in files:
            try:
                total += (Path(sub) / name).lstat().st_size
            except OSError:
                continue
    return total if total > BIG_DATA_DIR else None
