"""The launcher's output, read line by line: worker lines shown (without the launcher's
`[default0]:` tags), the launcher's own lines kept for the report (its traceback and
failure table are replaced by distrun's report), and each line that is progress of the
job reported to the hang detector.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

_TAG = re.compile(r"^\[[A-Za-z_]*(\d+)\]:")
MAX_LINES = 100_000  # distinct lines of standard output remembered (for repeated output)
# Decimal numbers (a loss, a time) differ from rank to rank in a line every rank prints;
# integers (an epoch, a rank) are kept, so per-rank lines ("rank 1 ready") stay apart.
_DECIMAL = re.compile(r"[-+]?\d*\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\bnan\b|\binf\b")
_AGENT_TRACE = re.compile(r"^Traceback \(most recent call last\):|ChildFailedError|^=+$")
# The launcher's own log lines (c10d's glog "[W1121 ...]" and torch elastic's "W1121 ..."):
# not progress of the job, so they do not reset the hang detector (a node retrying a wrong
# address prints them for ever).
# DeepSpeed's launcher logs the same way ("[2026-11-23 05:57:23,454] [ERROR] [launch.py:259:
# sigkill_handler] ... exits with return code = 1"): distrun's report says it better.
_AGENT_LOG = re.compile(r"^\[?[IWEF]\d{4} \d\d:\d\d:\d\d"
                        r"|^\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\] \[launch\.py:")
_DEEPSPEED_LAUNCHER = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\] \[launch\.py:")
# C++ stack frames c10d appends to each retry warning: noise, never shown.
_AGENT_FRAMES = re.compile(r"^frame #\d+: |^<omitting python frames>$|^Exception raised from ")


@dataclass(frozen=True)
class Shown:
    """Whose output is shown, and how: `ranks`, the local ranks shown (None: all; the
    others' output is still in the log folder); `prefix`, each line tagged `[rank N]`
    (N the global rank where `offset`, this node's first global rank, is known, else
    `[local rank N]`)."""

    ranks: frozenset[int] | None = None
    prefix: bool = False
    offset: int | None = 0

    def tag(self, local_rank: int) -> str:
        if not self.prefix:
            return ""
        if self.offset is None:
            return f"[local rank {local_rank}] "
        return f"[rank {self.offset + local_rank}] "


class Watcher:
    """Reads one of the launcher's streams: shows worker lines (those of the ranks `shown`
    names), keeps the launcher's own; `progress(local_rank)` is called for each line of the
    job's (local_rank None where no tag tells)."""

    def __init__(self, show: Callable[[str, bool], None],
                 progress: Callable[[int | None], None], shown: Shown | None = None) -> None:
        self.show = show
        self.progress = progress
        self.shown = shown or Shown()
        self.agent_lines: list[str] = []
        self.in_agent_trace = False
        self.quiet = False  # set once distrun stops the job: its own report says why
        self.lock = threading.Lock()
        # a worker's line of stdout, decimals masked -> its first text and the local ranks
        self.printed: dict[str, tuple[str, set[int]]] = {}

    def pump(self, stream: IO[bytes] | None, to_stderr: bool) -> None:
        assert stream is not None
        # torchrun copies each worker's log file to its own output as it grows, one read at
        # a time: a line the worker has half written (print writes its text, then "\n")
        # comes out in pieces, each tagged, and other ranks' lines can land between them
        # ("[default0]:loss 1.2[default1]:ready\n[default0]:\n"). The pieces are put back
        # together per rank; a line is shown once its newline came.
        pending: dict[int, str] = {}
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            tag = _TAG.match(line)
            if not tag:
                with self.lock:
                    self._agent_line(line, to_stderr)
                continue
            pieces = _pieces(line, tag)
            for rank, text in pieces[:-1]:
                pending[rank] = pending.get(rank, "") + text
            rank, text = pieces[-1]
            with self.lock:
                self._worker_line(rank, pending.pop(rank, "") + text, to_stderr)
        with self.lock:
            for rank, text in pending.items():
                self._worker_line(rank, text, to_stderr)

    def _worker_line(self, rank: int, text: str, to_stderr: bool) -> None:
        self.progress(rank)
        if not self.quiet and (self.shown.ranks is None or rank in self.shown.ranks):
            self.show(self.shown.tag(rank) + text, to_stderr)
        if not to_stderr and text.strip():
            self._remember(text, rank)

    def _agent_line(self, line: str, to_stderr: bool) -> None:
        if not (_AGENT_LOG.match(line) or _AGENT_FRAMES.match(line) or not line.strip()):
            self.progress(None)
        if _AGENT_FRAMES.match(line):
            return
        self.agent_lines.append(line)
        if _AGENT_TRACE.search(line):
            self.in_agent_trace = True
        if not (self.in_agent_trace or self.quiet or not line.strip()
                or _DEEPSPEED_LAUNCHER.match(line)):
            self.show(line, to_stderr)

    def _remember(self, text: str, local_rank: int) -> None:
        key = _DECIMAL.sub("#", text)
        seen = self.printed.get(key)
        if seen is not None:
            seen[1].add(local_rank)
        elif len(self.printed) < MAX_LINES:
            self.printed[key] = (text, {local_rank})


def _pieces(line: str, tag: re.Match[str]) -> list[tuple[int, str]]:
    """A tagged line cut where the same kind of tag (`[default1]:`) comes again: (local
    rank, text) for each piece, the last one the piece the newline ended."""
    role = re.escape(tag[0][1:tag[0].index(tag[1])])
    pieces: list[tuple[int, str]] = []
    rank, start = int(tag[1]), tag.end()
    for inner in re.compile(rf"\[{role}(\d+)\]:").finditer(line, start):
        pieces.append((rank, line[start:inner.start()]))
        rank, start = int(inner[1]), inner.end()
    pieces.append((rank, line[start:]))
    return pieces


closed: set[int] = set()  # 1/2: standard output/error whose reader went away


def print_line(line: str, to_stderr: bool) -> None:
    """Show a line. When the reader of a stream goes away (`distrun launch ... | head`),
    the job goes on (hours of training are not lost with a terminal) and that stream's
    lines are dropped; they are still in the log folder, which is then kept."""
    stream = sys.stderr if to_stderr else sys.stdout
    fd = 2 if to_stderr else 1
    if fd in closed:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (BrokenPipeError, ValueError):
        closed.add(fd)
        # nothing more reaches the closed pipe, not even at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        if fd == 1:
            print_line("distrun: standard output was closed; the job goes on, its output is "
                   "in the log folder", True)
