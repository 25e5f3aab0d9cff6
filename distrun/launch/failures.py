"""Which ranks failed and why: read from torchrun's failure table and the ranks' logs.

torchrun ends a failed job with a table (the root cause first, then the other
failures) giving each failed worker's global rank, local rank, host and exit code.
The error itself is in the rank's stderr log under `--log-dir`.
"""

from __future__ import annotations

import json
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

_ENTRY = re.compile(
    r"host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:\s*(?P<rank>-?\d+)\s*\(local_rank:\s*(?P<local>\d+)\)"
    r"\s*\n\s*exitcode\s*:\s*(?P<code>-?\d+)",
)
_RANK_TAG = re.compile(r"^\[rank\d+\]:\s?")
MAX_ERROR_LINES = 12


@dataclass
class Failure:
    rank: int
    local_rank: int
    host: str
    exit_code: int
    root_cause: bool = False
    error: str = ""
    stopped: bool = False  # ended by the launcher (a signal it sent), not by its own error

    @property
    def cause(self) -> str:
        """How this rank's end relates to the job's failure: `first failure`; `also
        stopped` (the launcher ended it); `lost peer` (its error is another's going away);
        `also failed` (an error of its own)."""
        if self.root_cause:
            return "first failure"
        if self.error and lost_peer(self.error) is not None:
            return "lost peer"
        if self.failed_first:
            return "also failed"
        if self.stopped or self.exit_code in (-signal.SIGTERM, -signal.SIGINT):
            return "also stopped"
        return "also failed"

    @property
    def failed_first(self) -> bool:
        """Ended by the launcher's signal, but its log already ends with an error of its
        own: it had failed and was still exiting (unwinding, flushing, freeing) when the
        signal came. A signal's own end leaves no traceback, except KeyboardInterrupt."""
        if not (self.stopped or self.exit_code < 0) or not self.error.startswith("Traceback"):
            return False
        last = self.error.splitlines()[-1]
        return not last.startswith(("KeyboardInterrupt", "SystemExit"))

    @property
    def how(self) -> str:
        if self.exit_code < 0:
            try:
                name = signal.Signals(-self.exit_code).name
            except ValueError:
                name = f"signal {-self.exit_code}"
            if self.failed_first:
                return f"its own error, then killed by {name} while it exited"
            return f"killed by {name}"
        if self.failed_first:
            return f"its own error, then exit code {self.exit_code} once stopped"
        return f"exit code {self.exit_code}"


def parse_failures(agent_output: str) -> list[Failure]:
    """The failed workers of torchrun's table, the root cause first."""
    root_at = agent_output.find("Root Cause")
    failures: list[Failure] = []
    for match in _ENTRY.finditer(agent_output):
        failures.append(Failure(
            rank=int(match["rank"]), local_rank=int(match["local"]), host=match["host"],
            exit_code=int(match["code"]), root_cause=root_at != -1 and match.start() > root_at,
        ))
    failures.sort(key=lambda f: (not f.root_cause, f.rank))
    return failures


def exit_records(log_dir: str, folder: str = "deepspeed") -> list[Failure]:
    """The failed workers of a job whose launcher prints no failure table, from the
    exit.json written for each under LOG_DIR/`folder` (DeepSpeed: by each worker's wrapper,
    `distrun.launch.rankrun`; a SLURM task's one rank: the same wrapper; Ray: by the
    driver, `distrun.launch.ray_driver`): the first to fail on its own is the root cause (a
    rank that only lost a peer comes after those that did not); those the launcher
    stopped come last."""
    records = []
    for path in Path(log_dir).glob(f"{folder}/attempt_*/*/exit.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    # A rank whose error is a lost peer failed because another did: never the first, even
    # when its wrapper recorded its end first (on a loaded machine).
    failed = sorted((r for r in records if r.get("exit_code")),
                    key=lambda r: (bool(r.get("stopped")),
                                   lost_peer(read_error(log_dir, int(r["local_rank"]))) is not None,
                                   r.get("time", 0.0)))
    failures = [Failure(rank=int(r["rank"]), local_rank=int(r["local_rank"]),
                        host=str(r["host"]), exit_code=int(r["exit_code"]),
                        stopped=bool(r.get("stopped")))
                for r in failed]
    if failures:
        failures[0].root_cause = True
    return failures


@dataclass
class Attempt:
    """An attempt of the worker group that failed and was restarted: its number and its
    first failure (the rank whose error is its own, not a lost peer's)."""

    number: int
    local_rank: int | None
    error: str


def attempts(log_dir: str) -> tuple[int, list[Attempt]]:
    """The restarts torchrun made (its `attempt_N` folders: N > 0 after a restart), and
    the first failure of each attempt before the last."""
    numbers = sorted({int(p.name.removeprefix("attempt_"))
                      for p in Path(log_dir).glob("*/attempt_*")
                      if p.name.removeprefix("attempt_").isdigit()})
    if len(numbers) < 2:
        return 0, []
    found = []
    for number in numbers[:-1]:
        errors = {}
        for log in Path(log_dir).glob(f"*/attempt_{number}/*/stderr.log"):
            if log.parent.name.isdigit():
                text = _traceback(log)
                if text:
                    errors[int(log.parent.name)] = text
        own = sorted(rank for rank, text in errors.items() if lost_peer(text) is None)
        first = own[0] if own else (min(errors) if errors else None)
        found.append(Attempt(number, first, errors.get(first, "") if first is not None
                             else ""))
    return numbers[-1], found


def _traceback(log: Path) -> str:
    lines = [_RANK_TAG.sub("", line) for line in log.read_text(errors="replace").splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    return "\n".join(lines[starts[-1]:]).strip() if starts else ""


def error_log(log_dir: str, local_rank: int) -> Path | None:
    """The rank's stderr log of the last attempt (None: none was written)."""
    logs = sorted(Path(log_dir).glob(f"*/attempt_*/{local_rank}/stderr.log"),
                  key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def read_error(log_dir: str, local_rank: int) -> str:
    """The end of the rank's error output: its last traceback (cut to MAX_ERROR_LINES,
    keeping the innermost frame of the user's own files), or its last lines."""
    log = error_log(log_dir, local_rank)
    if log is None:
        return ""
    lines = [_RANK_TAG.sub("", line) for line in log.read_text(errors="replace").splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    tail = lines[starts[-1]:] if starts else lines
    if len(tail) > MAX_ERROR_LINES:
        tail = _cut(tail)
    return "\n".join(tail).strip()


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')
_LIBRARIES = ("site-packages", "dist-packages", "<frozen", "/lib/python3")


def _cut(tail: list[str]) -> list[str]:
    """A long traceback: its first line, the innermost frame in the user's own files (its
    `File` line and the code under it), and the last lines (the library frames nearest
    the error and the error itself)."""
    keep = MAX_ERROR_LINES - 2
    frames = [i for i, line in enumerate(tail) if _FRAME.match(line)]
    own = [i for i in frames if not any(m in _FRAME.match(tail[i])["path"]  # type: ignore[index]
                                        for m in _LIBRARIES)]
    end = len(tail) - keep
    if not own or own[-1] >= end:  # no frame of the user's, or it is in the tail already
        return [tail[0], "  ...", *tail[end:]]
    first = own[-1]
    after = [i for i in frames if i > first]
    frame = tail[first:after[0] if after else first + 1][:4]
    gap = ["  ..."] if first > 1 else []
    rest = keep - len(gap) - len(frame)
    return [tail[0], *gap, *frame, "  ...", *tail[len(tail) - rest:]]


_PEER_LOST = re.compile(
    r"(?:Connection closed by peer|Connection reset by peer|Read error|Write error)\s*"
    r"\[(?P<addr>[^\]]+)\]")
_NCCL_PEER_LOST = re.compile(r"remote process exited or there was a network error")


def lost_peer(error: str) -> str | None:
    """The address of the peer whose loss this rank's error reports ("" when the error says
    a peer went away but not which): this rank is then a casualty, not the cause."""
    match = _PEER_LOST.search(error)
    if match:
        return match["addr"]
    return "" if _NCCL_PEER_LOST.search(error) else None


def workers_started(log_dir: str | None) -> bool:
    """Whether the launcher got as far as starting workers (it makes a folder per attempt)."""
    return bool(log_dir) and any(Path(str(log_dir)).glob("*/attempt_*"))


_PORT_TAKEN = re.compile(r"failed to listen on any local network address\. port: (\d+)"
                         r".*EADDRINUSE")


def taken_port(agent_output: str) -> int | None:
    """The port torchrun could not listen on because another process had it (taken after
    distrun checked it was free), from the launcher's own error."""
    match = _PORT_TAKEN.search(agent_output)
    return int(match[1]) if match else None


def free_space(folder: str) -> int | None:
    """Bytes a user can still write in `folder`'s file system (None: cannot tell)."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize
