"""Every file `distrun convert` writes: one path for the result, its backup, the project's
copy and a project rewritten in place.

- A lock: distrun.write_lock (held from before the input is read; a killed run's
  leftovers undone when it is taken).
- Checked first (`write_all`): every target, every backup and every file's content
  (still the bytes the conversion read: else nothing is written) before the first write.
- Atomic: each file is written to a temporary file in its own folder, fsynced, given the
  mode and owner of the file it replaces (a new file: the user's umask) and renamed over
  it; a symlink is followed (its target is rewritten, the link kept). A backup is made
  the same way, from the bytes the conversion read, and read back before anything is
  replaced.
- One transaction: each file to replace keeps a second name (a hard link: the original
  itself, no copy) until the end; when several files are replaced, a journal naming them
  is written first. On any failure the files already replaced are put back from those
  links. A run killed mid-way leaves the journal, and the next writing run in that folder
  puts the originals back before it starts (write_lock.recover).
- Leftovers: temporary files and folders are named `.NAME.distrun-PID-XXXX[.tmp]`; those
  of a process that is gone are removed by the next run in that folder. Those of distrun
  before this module (`.NAME.XXXXXXXX.tmp`, `.proj_ddp.XXXXXXXX`) are named, with the
  command that removes them.

Test hook: DISTRUN_WRITES_STOP_AT=POINT stops the writer (SIGSTOP) at a named point
(`lock`, `staged`, `backup`, `journal`, `replaced`, `copied`), so that a test can kill
it exactly there (tests/hardening/test_write_faults.py).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import signal
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distrun.errors import InputError


def stop_point(name: str) -> None:
    """The test hook: stop here when DISTRUN_WRITES_STOP_AT names this point."""
    if os.environ.get("DISTRUN_WRITES_STOP_AT") == name:
        os.kill(os.getpid(), signal.SIGSTOP)


def temp_name(folder: Path, name: str, suffix: str = ".tmp") -> Path:
    """A fresh temporary name in `folder` that a later run recognises as this run's."""
    return folder / f".{name}.distrun-{os.getpid()}-{os.urandom(3).hex()}{suffix}"


def new_mode(directory: bool = False) -> int:
    """The mode a new file (or folder) gets under the user's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic(target: Path, data: bytes, like: Path | None = None) -> Path:
    """Write `data` to a temporary file beside `target` (fsynced, with `like`'s mode,
    owner and, for a backup, times; else the umask's mode) and rename it over `target`."""
    tmp = _staged(target, data, like)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(target.parent)
    return target


def _staged(target: Path, data: bytes, like: Path | None, times: bool = False) -> Path:
    """`data` in a fresh temporary file beside `target`, fsynced, with `like`'s metadata."""
    tmp = temp_name(target.parent, target.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _copy_meta(like, tmp, times)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _copy_meta(like: Path | None, tmp: Path, times: bool) -> None:
    try:
        st = like.stat() if like is not None else None
    except OSError:
        st = None
    if st is None:
        os.chmod(tmp, new_mode())
        return
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(OSError):  # only root may give a file away
            os.chown(tmp, st.st_uid, st.st_gid)
    if times:
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))


@dataclass
class _Plan:
    """One file of a transaction, checked."""

    target: Path  # symlinks followed
    data: bytes
    like: Path | None
    current: bytes | None  # what the target holds now (None: no file yet)
    backup: Path | None  # the backup to make (None: none, or an identical one is there)
    tmp: Path | None = None
    keep: Path | None = None  # a hard link to the original until the end: the way back
    made_backup: bool = False
    replaced: bool = False


def plan(path: str, data: bytes, like: str | None, backup: bool, force: bool,
         original: bytes | None) -> _Plan | None:
    """Check one write; None when the target already holds `data`. InputError when it
    may not or cannot be written."""
    try:
        return _plan(path, data, like, backup, force, original)
    except OSError as err:
        raise InputError(f"{err.filename or path}: cannot read it to replace it: "
                         f"{err.strerror or err}: nothing written") from None


def _plan(path: str, data: bytes, like: str | None, backup: bool, force: bool,
          original: bytes | None) -> _Plan | None:
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InputError(f"{path}: cannot write: {err.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a directory", "give a file name with -o")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file (a pipe or a device): refusing to "
                         "replace it", "give -o another file name")
    current = target.read_bytes() if st is not None else None
    if current == data:
        return None
    if original is not None and current != original:
        raise InputError(f"{path} changed since distrun read it (another program, or "
                         "another distrun convert, wrote it): nothing written",
                         "run the command again: it converts what the file holds now")
    if current is not None and not force:
        raise InputError(f"{path} already exists", "pass --force to replace it (the old "
                         f"one is kept as {path}.orig), or choose another -o")
    to_back_up = None
    if backup and current is not None:
        to_back_up = Path(f"{target}.orig")
        old = to_back_up.read_bytes() if to_back_up.is_file() else None
        if old == current:
            to_back_up = None  # the backup there already holds these bytes
        elif to_back_up.exists() and (old is None or not current.startswith(old)):
            raise InputError(f"{to_back_up} already exists and holds another file: "
                             "refusing to replace an earlier backup",
                             f"compare it with {path} and move it away (mv {to_back_up} "
                             f"{to_back_up}.old), then run this again")
        # an empty or truncated copy of the current file (an interrupted run's) is replaced
    return _Plan(target, data, Path(like) if like else (target if st else None), current,
                 to_back_up)


def write_all(plans: Sequence[_Plan]) -> None:
    """Write the checked `plans` as one transaction: every file staged and every backup
    made and read back before the first replace; on any failure (or interruption) the
    files already replaced are put back and what this run made is removed."""
    journal: Path | None = None
    doing: Path | None = None  # what an error names
    try:
        for p in plans:
            doing = p.target
            _make_folder(p.target.parent)
            p.tmp = _staged(p.target, p.data, p.like)
        stop_point("staged")
        for p in plans:
            if p.backup is not None and p.current is not None:
                doing = p.backup
                _back_up(p)
        stop_point("backup")
        replacing = [p for p in plans if p.current is not None]
        for p in replacing:
            p.keep = _hard_link(p.target)
        if len(plans) > 1 and replacing:
            doing = plans[0].target.parent
            journal = _write_journal(plans)
            stop_point("journal")
        for p in plans:
            assert p.tmp is not None
            doing = p.target
            os.replace(p.tmp, p.target)
            p.tmp, p.replaced = None, True
            stop_point("replaced")
        for folder in {p.target.parent for p in plans}:
            fsync_folder(folder)
        if journal is not None:
            journal.unlink()
        for p in replacing:
            if p.keep is not None:
                p.keep.unlink(missing_ok=True)
    except BaseException as err:
        put_back = any(p.replaced for p in plans)
        _undo(plans, journal)
        if isinstance(err, OSError):
            raise InputError(f"{doing}: cannot write: {err.strerror or err}: nothing written"
                             + (" (the files already replaced are put back)" if put_back
                                else "")) from None
        raise


def _back_up(p: _Plan) -> None:
    assert p.backup is not None and p.current is not None
    tmp = _staged(p.backup, p.current, p.target, times=True)
    try:
        if p.backup.exists():  # a truncated copy, checked in `plan`
            os.replace(tmp, p.backup)
        else:
            _link_new(tmp, p.backup)
        p.made_backup = True
    finally:
        tmp.unlink(missing_ok=True)
    if p.backup.read_bytes() != p.current:
        raise OSError(errno.EIO, "the backup does not read back as the original",
                      str(p.backup))


def _link_new(tmp: Path, path: Path) -> None:
    """Give `tmp` the name `path`, which must not exist (a hard link fails if another run
    made it meanwhile; where the filesystem has none, a check and a rename)."""
    try:
        os.link(tmp, path)
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        if path.exists():
            raise
        os.replace(tmp, path)


def _hard_link(target: Path) -> Path | None:
    """A second name for the file about to be replaced (no data copied, so it works on a
    full disk too); None where the filesystem has no hard links."""
    keep = temp_name(target.parent, target.name)
    try:
        os.link(target, keep)
    except OSError:
        return None
    return keep


def _write_journal(plans: Sequence[_Plan]) -> Path:
    folder = Path(os.path.commonpath([str(p.target.parent.resolve()) for p in plans]))
    journal = folder / f".distrun-convert-{os.getpid()}.journal"
    entries = [{"path": str(p.target.resolve()), "new": digest(p.data),
                "original": digest(p.current), "keep": str(p.keep),
                "backup": str(p.backup.resolve()) if p.made_backup and p.backup else None}
               for p in plans if p.current is not None]
    atomic(journal, json.dumps(entries).encode())
    return journal


def _undo(plans: Sequence[_Plan], journal: Path | None) -> None:
    for p in plans:
        with contextlib.suppress(OSError):
            if p.tmp is not None:
                p.tmp.unlink(missing_ok=True)
            if p.replaced and p.keep is not None:
                os.replace(p.keep, p.target)
                p.keep = None
            elif p.replaced and p.current is not None:
                atomic(p.target, p.current, like=p.target)
            elif p.replaced:
                p.target.unlink(missing_ok=True)
            if p.made_backup and p.backup is not None:
                p.backup.unlink(missing_ok=True)
            if p.keep is not None:
                p.keep.unlink(missing_ok=True)
    if journal is not None:
        journal.unlink(missing_ok=True)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{folder}: cannot make the folder: {err.strerror or err}") from None
