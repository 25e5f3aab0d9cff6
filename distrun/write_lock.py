"""The lock `distrun convert` holds on the folder it writes into, and the undoing of what
a killed run left there (distrun.writes says how the files are written).

A writing run holds an advisory lock (flock) on that folder from before it reads its
input until its files are written; a second run waits for it (saying so), then reads what
the first left; after WAIT_S seconds it gives up (exit 2). The kernel drops the lock of a
killed run. On taking the lock, a killed run's journal is rolled back (the originals put
back from their hard links, or from the backup) and its temporary files and folders are
removed; those of distrun before this module are named with the command that removes
them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from distrun.errors import InputError
from distrun.writes import atomic, digest, fsync_folder, stop_point

_LEFTOVER = re.compile(r"^\..+\.distrun-(\d+)-[0-9a-f]{6}(\.tmp)?$")
_JOURNAL = re.compile(r"^\.distrun-convert-(\d+)\.journal$")
# what distrun before the write path left (mkstemp's and mkdtemp's names): named, not removed
_OLD_TEMP = re.compile(r"^\.(.+)\.[a-z0-9_]{8}\.tmp$")
_OLD_STAGING = re.compile(r"^\.(.+_(?:ddp|accelerate|deepspeed|fsdp))\.[a-z0-9_]{8}$")
WAIT_S = 120.0


@dataclass
class Held:
    """A lock held by `locked`: the folder, and what was cleaned up when it was taken."""

    folder: Path
    cleaned: list[str] = field(default_factory=list)


@contextlib.contextmanager
def locked(folder: Path, on_wait: Callable[[str], None] | None = None,
           wait_s: float = WAIT_S, deep: bool = False) -> Iterator[Held]:
    """Hold the lock on `folder` (its nearest existing parent) while the body runs; on
    taking it, undo what a killed run left there (in sub-folders too with `deep`)."""
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # an unreadable folder: writing there fails later, clearly
        yield Held(folder)
        return
    try:
        _take(fd, folder, on_wait, wait_s)
        stop_point("lock")
        held = Held(folder)
        held.cleaned = recover(folder, deep)
        yield held
    finally:
        os.close(fd)  # releases the lock


def _take(fd: int, folder: Path, on_wait: Callable[[str], None] | None, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return  # a filesystem without locks: go on unlocked
        if not told and on_wait is not None:
            on_wait(f"another distrun convert is writing in {folder}: waiting for it")
            told = True
        if time.monotonic() > deadline:
            raise InputError(f"another distrun convert is still writing in {folder} after "
                             f"{wait_s:.0f} s: nothing written",
                             "let it finish (or stop it), then run this again")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def recover(folder: Path, deep: bool = False) -> list[str]:
    """Undo what killed runs left in `folder`: their journals (the originals are put back)
    and their temporary files and folders. What was done, one line each."""
    done: list[str] = []
    folders = [folder]
    if deep:
        for sub, dirs, _files in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            folders += [Path(sub) / d for d in dirs]
    for where in folders:
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        for name in names:
            journal = _JOURNAL.match(name)
            if journal and not _alive(int(journal.group(1))):
                done += _roll_back_journal(where / name)
        for name in names:
            left = _LEFTOVER.match(name)
            path = where / name
            if left and not _alive(int(left.group(1))) and path.exists():
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                done.append(f"removed {path}, left by an interrupted distrun convert")
            elif _old_leftover(where, name):
                done.append(f"{path} looks left by an interrupted older distrun convert: "
                            f"remove it with: rm -r {shlex.quote(str(path))}")
    return done


def _old_leftover(folder: Path, name: str) -> bool:
    temp = _OLD_TEMP.match(name)
    if temp is not None:
        return (folder / temp.group(1)).is_file()
    staging = _OLD_STAGING.match(name)
    return staging is not None and (folder / name).is_dir()


def _roll_back_journal(journal: Path) -> list[str]:
    try:
        entries = json.loads(journal.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        journal.unlink(missing_ok=True)
        return [f"removed {journal}, an unfinished journal of an interrupted run (it had "
                "replaced nothing yet)"]
    done = []
    for entry in entries:
        path, original = Path(entry["path"]), entry["original"]
        current = digest(path.read_bytes()) if path.is_file() else None
        if current is None or current != entry["new"]:
            continue  # not replaced (or changed since): left as it is
        keep = Path(entry["keep"])
        backup = Path(entry["backup"]) if entry.get("backup") else None
        if keep.is_file() and digest(keep.read_bytes()) == original:
            os.replace(keep, path)  # the original file itself, its mode and owner
        elif backup is not None and backup.is_file() and \
                digest(backup.read_bytes()) == original:
            atomic(path, backup.read_bytes(), like=backup)
        else:
            done.append(f"{path} was replaced by an interrupted distrun convert and its "
                        f"original is lost: look for {path}.orig")
            continue
        done.append(f"put back the original {path}: an interrupted distrun convert had "
                    "replaced it")
        if backup is not None and backup.is_file():
            backup.unlink()  # made by the interrupted run: the original is back
    fsync_folder(journal.parent)
    journal.unlink(missing_ok=True)
    return done


def lock_folder(source: str, mode: str, output: str | None, project: bool,
                root: str | None) -> tuple[Path, bool] | None:
    """The folder a run of `distrun convert` writes into (and whether its sub-folders are
    written too): the one it locks. None: the mode writes nothing."""
    if mode == "in-place":
        entry = Path(os.path.realpath(source))
        return (Path(root).resolve() if root else entry.parent), project
    if mode == "file":
        if output is None:
            return Path(source).resolve().parent, False
        out = Path(output)
        return (out if output.endswith(("/", os.sep)) or out.is_dir() else out.parent), False
    if mode == "folder":
        top = Path(root).resolve() if root else Path(source).resolve().parent
        return ((Path(output) if output.endswith(("/", os.sep)) else Path(output).parent)
                if output else top.parent), False
    return None
