"""Reading scripts faithfully and writing results safely.

Scripts are decoded as Python itself would (a BOM or a coding line), their line
endings kept; results are written through distrun.writes (a temporary file in
the target's folder renamed over it, the files of one run as one transaction), and an
existing file is kept as FILE.orig before it is replaced.

Where a result goes (`output_file`): `-o` as given, or, when it names an existing folder
or ends in `/`, the default file name inside that folder; a missing folder on the way is
made when the file is written (`write_files`).
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distrun.errors import InputError


@dataclass(frozen=True)
class Script:
    text: str
    encoding: str
    bom: bool
    raw: bytes | None = None  # the bytes read

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding if self.encoding != "utf-8-sig" else "utf-8")
        return (b"\xef\xbb\xbf" + data) if self.bom else data

    @property
    def is_empty(self) -> bool:
        """No code at all: nothing, blank lines, or comments only."""
        return all(not line.strip() or line.lstrip().startswith("#")
                   for line in self.text.splitlines())


def read_script(path: str) -> Script:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if p.is_dir():
        raise InputError(f"{path}: is a directory, not a Python script")
    if not stat.S_ISREG(p.stat().st_mode):
        raise InputError(f"{path}: not a regular file (a pipe or a device), not a Python "
                         "script", "convert the file itself")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from None
    if b"\0" in data:
        raise InputError(f"{path}: binary file, not a Python script")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as err:
        raise InputError(f"{path}: not a Python script: cannot decode it ({err})",
                         "save it as UTF-8, or declare its encoding in a coding line") from None
    bom = data.startswith(b"\xef\xbb\xbf")
    if bom:
        text = text.removeprefix("\ufeff")
    return Script(text, encoding, bom, data)


def default_output(script: str, target: str = "ddp") -> str:
    p = Path(script)
    return str(p.with_name(f"{p.stem}_{target}{p.suffix or '.py'}"))


def is_folder_name(output: str) -> bool:
    """`-o OUT` names a folder to write into: it ends in `/` or is an existing folder."""
    return output.endswith(("/", os.sep)) or Path(output).is_dir()


def output_file(output: str | None, default: str) -> str:
    """The file a result is written to: `default` when no `-o` was given; the file of
    `default`'s name inside OUT when OUT names a folder (`build/` -> build/train_ddp.py);
    else OUT itself."""
    if output is None:
        return default
    if not is_folder_name(output):
        return output
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{output}: not a folder", "give -o a folder, or a file name "
                         "without the trailing /")
    return str(folder / Path(default).name)


def same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve() or (
            Path(a).exists() and os.path.samefile(a, b))
    except OSError:
        return False


def needs_writing(target: str, data: bytes, force: bool = False) -> bool:
    """False when `target` already holds `data`; InputError when it cannot or may not be
    replaced (a folder, a pipe, or another content without `force`)."""
    from distrun.writes import plan

    return plan(target, data, None, False, force, None) is not None


def write_atomic(target: str, data: bytes, like: str | None = None, backup: bool = False,
                 force: bool = False) -> None:
    """Write `data` to `target` atomically; keep an existing target as TARGET.orig if `backup`."""
    write_files([FileWrite(target, data, like=like, backup=backup, force=force)])


@dataclass(frozen=True)
class FileWrite:
    """One file to write: `data` to `path` (with `like`'s permissions, when given); an
    existing different file is replaced only with `force`, and kept as PATH.orig with
    `backup`. `original`: the bytes the conversion read from `path` (in place): the
    file must still hold them, and they are what the backup holds."""

    path: str
    data: bytes
    like: str | None = None
    backup: bool = False
    force: bool = False
    original: bytes | None = None


def write_files(writes: Sequence[FileWrite]) -> None:
    """Write every file as one transaction (distrun.writes): all checked before
    the first write, each atomic, the replaced ones put back on any failure."""
    from distrun.writes import plan, write_all

    plans = [plan(w.path, w.data, w.like, w.backup, w.force, w.original) for w in writes]
    write_all([p for p in plans if p is not None])


