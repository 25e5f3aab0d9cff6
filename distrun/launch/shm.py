"""Shared-memory files that jobs leave behind in /dev/shm: DeepSpeed's CPU all-reduce
buffers (`deepspeed_allreduce_buffer_*`, one per rank of every CPU job, tens of MB each)
are created by each rank and never unlinked, so a machine running many CPU jobs fills
its /dev/shm until a run dies for want of memory. A buffer that no live process holds
open or mapped belongs to a job that has ended: `leftovers()` finds those, `remove()`
deletes them. Linux (/proc); elsewhere nothing is found.

Imports nothing heavy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SHM = Path("/dev/shm")
PATTERNS = ("deepspeed_allreduce_buffer_*",)
_PROC = Path("/proc")


@dataclass
class Leftovers:
    files: list[Path] = field(default_factory=list)
    size: int = 0  # bytes, all together

    def describe(self) -> str:
        return f"{len(self.files)} file(s), {self.size / 2**20:.0f} MiB"


def _in_use() -> set[str]:
    """Every path a live process has open or mapped."""
    used: set[str] = set()
    if not _PROC.is_dir():
        return used
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                try:
                    used.add(os.readlink(fd))
                except OSError:
                    continue
        except OSError:
            pass
        try:
            with open(entry / "maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6:
                        used.add(parts[5].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            continue
    return used


def leftovers(folder: Path = SHM, patterns: tuple[str, ...] = PATTERNS) -> Leftovers:
    """The files of `folder` matching `patterns` that no live process holds: the files are
    listed before /proc is read, so a buffer that a starting job has just made is seen
    open by its maker and kept."""
    found = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    result = Leftovers()
    if not found:
        return result
    used = _in_use()
    for path in found:
        if str(path) in used or str(path.resolve()) in used:
            continue
        try:
            result.size += path.stat().st_size
        except OSError:
            continue
        result.files.append(path)
    return result


def remove(since: float | None = None, folder: Path = SHM,
           patterns: tuple[str, ...] = PATTERNS) -> Leftovers:
    """Delete the leftovers of `folder` (those changed at or after `since`, a time.time(),
    when given: a job's own, not what a process out of sight, in another container sharing
    this /dev/shm, may be about to open); returns what was deleted."""
    gone = Leftovers()
    found = leftovers(folder, patterns)
    for path in found.files:
        try:
            stat = path.stat()
            size = stat.st_size
            if since is not None and stat.st_mtime < since - 1:
                continue
            path.unlink()
        except OSError:
            continue
        gone.files.append(path)
        gone.size += size
    return gone
