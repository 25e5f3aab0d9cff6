"""Reading scripts faithfully and writing results safely.

Scripts are decoded as Python itself would (a BOM or a coding line), their line
endings kept; results are written to a temporary file in the target's folder and
renamed over it, so a failure never leaves a half-written file, and an existing
file is kept as FILE.orig before it is replaced.

Where a result goes (`output_file`): `-o` as given, or, when it names an existing folder
or ends in `/`, the default file name inside that folder; a missing folder on the way is
made when the file is written (`write_files`).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
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
    return Script(text, encoding, bom)


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
    replaced (a folder, or another content without `force`)."""
    t = Path(target)
    if t.is_dir():
        raise InputError(f"{target}: is a directory", "give a file name with -o")
    if t.exists() and not force:
        if t.read_bytes() == data:
            return False
        raise InputError(f"{target} already exists", "pass --force to replace it "
                         f"(the old one is kept as {target}.orig), or choose another -o")
    return True


def write_atomic(target: str, data: bytes, like: str | None = None, backup: bool = False,
                 force: bool = False) -> None:
    """Write `data` to `target` atomically; keep an existing target as TARGET.orig if `backup`."""
    t = Path(target)
    if not needs_writing(target, data, force):
        return
    backup_path = Path(f"{target}.orig")
    if backup and t.exists() and backup_path.exists():
        raise InputError(f"{backup_path} already exists: refusing to replace an earlier backup",
                         "move it away first (or, with --in-place, pass --no-backup)")
    folder = t.parent if str(t.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{t.name}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise InputError(f"{target}: cannot write: {err.strerror}") from None
    made_backup = False
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if like is not None and Path(like).exists():
            shutil.copymode(like, tmp)
        if backup and t.exists():
            shutil.copy2(t, backup_path)
            made_backup = True
        os.replace(tmp, t)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if made_backup:  # on any error nothing is written: not even the backup
            backup_path.unlink(missing_ok=True)
        raise InputError(f"{target}: cannot write: {err.strerror}") from None


@dataclass(frozen=True)
class FileWrite:
    """One file to write: `data` to `path` (with `like`'s permissions, when given); an
    existing different file is replaced only with `force`, and kept as PATH.orig with
    `backup`."""

    path: str
    data: bytes
    like: str | None = None
    backup: bool = False
    force: bool = False


def write_files(writes: Sequence[FileWrite]) -> None:
    """Write every file, each atomically, after checking that each may be written (so a
    refusal writes none); a missing folder on the way is made."""
    for write in writes:
        if needs_writing(write.path, write.data, write.force) and write.backup \
                and Path(write.path).exists() and Path(f"{write.path}.orig").exists():
            raise InputError(f"{write.path}.orig already exists: refusing to replace an "
                             "earlier backup", "move it away first (or, with --in-place, "
                             "pass --no-backup)")
    for write in writes:
        _make_folder(Path(write.path).parent)
        write_atomic(write.path, write.data, like=write.like, backup=write.backup,
                     force=write.force)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{folder}: cannot make the folder: {err.strerror or err}") from None
