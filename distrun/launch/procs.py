"""The processes of a job, read from /proc: who is below whom, which are workers (and of
which local rank), how much CPU they used; and signalling them. Linux; elsewhere nothing
is found (and the prctl calls do nothing).

Imports nothing heavy: the guard (guard.py) runs on it in a process of its own.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

GRACE_SECONDS = 5.0  # from SIGTERM to SIGKILL when a job is stopped
_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first); [] if gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2:].split()


def children_map() -> dict[int, list[int]]:
    """Parent pid -> its live (not zombie) children's pids."""
    children: dict[int, list[int]] = {}
    if not _PROC.is_dir():
        return children
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc; empty where there is none)."""
    children = children_map()
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def local_rank(pid: int) -> int | None:
    """The LOCAL_RANK the launcher set in a worker's environment (its children inherit it)."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"LOCAL_RANK=") and item[11:].isdigit():
            return int(item[11:])
    return None


def live_local_ranks(root: int) -> set[int]:
    """The LOCAL_RANK of every live worker below `root`."""
    return {rank for pid in descendants(root) if (rank := local_rank(pid)) is not None}


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) `pid` has used so far; 0 if it is gone."""
    fields = _stat_fields(pid)
    if len(fields) < 13:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def send(pid: int, signum: int) -> None:
    """Signal `pid`, if it still exists and may be signalled."""
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def send_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of `pids` and reap those that are our children."""
    for pid in pids:
        send(pid, signal.SIGKILL)
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _prctl(option: int, value: int) -> None:
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process, not init, so they can be
    found and stopped."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """This process gets `signum` when its parent dies (called in a child before exec)."""
    _prctl(_PR_SET_PDEATHSIG, signum)
