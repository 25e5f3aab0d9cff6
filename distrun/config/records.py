"""What a config check returns, and the bounded reading of a config file.

`Config` (the checked values, the line of each key, the problems) and `Problem` (a line, a
key, a message) are shared by distrun.yaml's checks (load.py) and the DeepSpeed config's
(deepspeed.py, deepspeed_job.py); they live here so that those modules depend on this one,
not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from distrun.config.schema import KEYS, defaults
from distrun.errors import InputError

MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Problem:
    line: int
    key: str
    message: str
    severity: Literal["error", "warning"] = "error"


@dataclass
class Config:
    path: str
    values: dict[str, Any] = field(default_factory=dict)  # what the file sets, checked
    lines: dict[str, int] = field(default_factory=dict)  # "rdzv.endpoint" -> line
    problems: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def resolved(self) -> dict[str, Any]:
        """Every key: the file's value, else its default."""
        merged = defaults()
        for name, value in self.values.items():
            if isinstance(value, dict) and KEYS[name].kind == "section":
                merged[name].update(value)
            else:
                merged[name] = value
        return merged


def read(path: str) -> str | Problem:
    """A config file's text (bounded), or the problem that makes it no config; a file that
    cannot be read is exit 2."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such config file",
                         "create one with `distrun config init`, or give its path")
    if p.is_dir():
        raise InputError(f"{path}: is a directory, not a config file")
    try:
        data = p.read_bytes()[: MAX_BYTES + 1]
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from None
    if len(data) > MAX_BYTES:
        return Problem(1, "", "file larger than 1 MiB: not a config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return Problem(1, "", "not UTF-8 text")
