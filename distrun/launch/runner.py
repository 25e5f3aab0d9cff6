"""Starts a backend's command and supervises it until every process is gone.

- Output: workers' lines are shown live, without the launcher's `[default0]:` tags;
  torchrun's own traceback and failure table are replaced by distrun's report.
- Failure: the launcher (torchrun) stops the other ranks as soon as one fails; the
  report names the failed rank(s), host, exit code or signal, and quotes the first
  failure's error from its log.
- Hang: with a timeout, a job that prints nothing for that long is stopped and said so.
- Signals: Ctrl-C / SIGTERM go to the whole job; after a grace period, everything still
  alive is killed. distrun is a child subreaper (Linux), so workers orphaned by a dying
  launcher are still found and stopped: no process outlives `distrun launch`.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from distrun.errors import EXIT_BAD_INPUT, LaunchError
from distrun.launch.failures import (
    Failure,
    free_space,
    parse_failures,
    read_error,
    taken_port,
)
from distrun.launch.spec import Command, LaunchSpec

EXIT_FAILED = 1
EXIT_HUNG = 124
GRACE_SECONDS = 5.0
LOW_SPACE = 16 << 20  # bytes free in the log folder below which distrun warns at start
FULL = 64 << 10  # bytes free below which the log folder counts as full at the end
_TAG = re.compile(r"^\[[A-Za-z_]*(\d+)\]:")
_AGENT_TRACE = re.compile(r"^Traceback \(most recent call last\):|ChildFailedError|^=+$")
# The launcher's own log lines (c10d's glog "[W1121 ...]" and torch elastic's "W1121 ..."):
# not progress of the job, so they do not reset the hang detector (a node retrying a wrong
# address prints them for ever).
_AGENT_LOG = re.compile(r"^\[?[IWEF]\d{4} \d\d:\d\d:\d\d")
# C++ stack frames c10d appends to each retry warning: noise, never shown.
_AGENT_FRAMES = re.compile(r"^frame #\d+: |^<omitting python frames>$|^Exception raised from ")


@dataclass
class RunResult:
    exit_code: int
    reason: str  # "ok" | "failed" | "hung" | "interrupted" | "port-taken"
    failures: list[Failure] = field(default_factory=list)
    log_dir: str | None = None
    seconds: float = 0.0
    detail: str = ""
    # Local ranks of this node that had ended with exit code 0 while the job was still on
    # (a failed job's table lists every rank that did not end cleanly; a hung job's live
    # workers are looked up in /proc), each with its global rank where known.
    ended_early: list[tuple[int | None, int]] = field(default_factory=list)
    log_space: int | None = None  # bytes free for the logs at the end, if nearly none


def run(command: Command, spec: LaunchSpec, echo: Callable[[str, bool], None] | None = None,
        ) -> RunResult:
    """Run and supervise `command`; `echo(line, to_stderr)` shows output (default: print)."""
    show = echo or _print
    if spec.log_dir:
        try:
            Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LaunchError(f"--log-dir {spec.log_dir}: cannot create it: {err.strerror}",
                              "give a folder you can write to") from None
        space = free_space(spec.log_dir)
        if space is not None and space < LOW_SPACE:
            show(f"distrun: warning: only {space >> 10} KiB free for the logs in "
                 f"{spec.log_dir}: every rank's output goes through it, and a rank that "
                 "cannot write its output fails", True)
    _become_subreaper()
    env = {**os.environ, **command.env}
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
        )
    except OSError as err:
        raise LaunchError(f"cannot start {command.argv[0]}: {err.strerror}") from None
    watcher = _Watcher(show)
    readers = [
        threading.Thread(target=watcher.pump, args=(proc.stdout, False), daemon=True),
        threading.Thread(target=watcher.pump, args=(proc.stderr, True), daemon=True),
    ]
    for reader in readers:
        reader.start()
    stop = _StopRequest()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    reason, code, interrupted_by = "ok", 0, ""
    live: set[int] = set()  # local ranks with a live worker when the job is found hung
    try:
        while proc.poll() is None:
            time.sleep(0.1)
            if stop.signum is not None:
                reason, code = "interrupted", 128 + stop.signum
                interrupted_by = signal.Signals(stop.signum).name
                watcher.quiet = True
                _stop_job(proc, stop.signum)
                break
            idle = time.monotonic() - watcher.last_output
            if spec.timeout is not None and idle > spec.timeout:
                reason, code = "hung", EXIT_HUNG
                live = live_local_ranks(proc.pid)
                watcher.quiet = True
                _stop_job(proc, signal.SIGTERM)
                break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop_job(proc, signal.SIGTERM, grace=GRACE_SECONDS if proc.poll() is None else 0.0)
        for reader in readers:
            reader.join(timeout=2)
    if reason == "ok" and proc.returncode != 0:
        reason, code = "failed", EXIT_FAILED
    result = RunResult(code, reason, log_dir=spec.log_dir,
                       seconds=time.monotonic() - started)
    nproc = spec.nproc_per_node if isinstance(spec.nproc_per_node, int) else 0
    if reason == "failed":
        agent_output = "\n".join(watcher.agent_lines)
        result.failures = parse_failures(agent_output)
        if result.failures and spec.log_dir:
            first = result.failures[0]
            first.error = read_error(spec.log_dir, first.local_rank)
        port = taken_port(agent_output)
        if not result.failures and port is not None:
            result.reason, result.exit_code, result.detail = "port-taken", EXIT_BAD_INPUT, str(
                port)
        elif not result.failures:
            result.detail = "\n".join(watcher.agent_lines[-15:])
        failed = {f.local_rank: f.rank - f.local_rank for f in result.failures}
        result.ended_early = _ended_early(nproc, set(failed), next(iter(failed.values()), None))
    if reason == "interrupted":
        result.detail = interrupted_by
    if reason == "hung":
        result.detail = f"no output from any rank for {spec.timeout:g} s"
        result.ended_early = _ended_early(nproc, live, 0 if spec.max_nodes == 1 else None)
    if spec.log_dir:
        space = free_space(spec.log_dir)
        result.log_space = space if space is not None and space < FULL else None
    if reason == "ok" and spec.log_dir and not spec.keep_logs and not _closed:
        shutil.rmtree(spec.log_dir, ignore_errors=True)
        result.log_dir = None
    return result


def _ended_early(nproc: int, still: set[int], offset: int | None,
                 ) -> list[tuple[int | None, int]]:
    """The local ranks (with their global rank where `offset` tells it) not among `still`:
    the ranks that failed, or that were still running. Nothing when `still` is empty."""
    if not still:
        return []
    return [(None if offset is None else offset + local, local)
            for local in range(nproc) if local not in still]


class _Watcher:
    """Reads one of the launcher's streams: shows worker lines, keeps the launcher's own."""

    def __init__(self, show: Callable[[str, bool], None]) -> None:
        self.show = show
        self.last_output = time.monotonic()
        self.agent_lines: list[str] = []
        self.in_agent_trace = False
        self.quiet = False  # set once distrun stops the job: its own report says why
        self.lock = threading.Lock()

    def pump(self, stream: IO[bytes] | None, to_stderr: bool) -> None:
        assert stream is not None
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            with self.lock:
                tag = _TAG.match(line)
                if tag or not (_AGENT_LOG.match(line) or _AGENT_FRAMES.match(line)
                               or not line.strip()):
                    self.last_output = time.monotonic()
                if tag:
                    if not self.quiet:
                        self.show(line[tag.end():], to_stderr)
                    continue
                if _AGENT_FRAMES.match(line):
                    continue
                self.agent_lines.append(line)
                if _AGENT_TRACE.search(line):
                    self.in_agent_trace = True
                if not (self.in_agent_trace or self.quiet or not line.strip()):
                    self.show(line, to_stderr)


class _StopRequest:
    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum


_closed: set[int] = set()  # 1/2: standard output/error whose reader went away


def _print(line: str, to_stderr: bool) -> None:
    """Show a line. When the reader of a stream goes away (`distrun launch ... | head`),
    the job goes on (hours of training are not lost with a terminal) and that stream's
    lines are dropped; they are still in the log folder, which is then kept."""
    stream = sys.stderr if to_stderr else sys.stdout
    fd = 2 if to_stderr else 1
    if fd in _closed:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (BrokenPipeError, ValueError):
        _closed.add(fd)
        # nothing more reaches the closed pipe, not even at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        if fd == 1:
            _print("distrun: standard output was closed; the job goes on, its output is "
                   "in the log folder", True)


def _stop_job(proc: subprocess.Popen[bytes], signum: int, grace: float = GRACE_SECONDS) -> None:
    """Signal the launcher and every process below it; kill what is left after `grace`."""
    if grace <= 0 and proc.poll() is not None:
        _kill_all(descendants(os.getpid()))
        return
    pids = descendants(proc.pid) + [proc.pid]
    for pid in pids:
        _signal(pid, signum)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    _kill_all(descendants(os.getpid()))
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _signal(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def live_local_ranks(root: int) -> set[int]:
    """The LOCAL_RANK of every live worker below `root` (the launcher sets it in each
    worker's environment; their own children inherit it)."""
    ranks = set()
    for pid in descendants(root):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"LOCAL_RANK=") and item[11:].isdigit():
                ranks.add(int(item[11:]))
    return ranks


def descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _become_subreaper() -> None:
    """Orphaned workers are re-parented to distrun, not init, so they can be stopped."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _die_with_parent() -> None:
    """In the launcher's process: if distrun is killed, the launcher gets SIGTERM, which it
    answers by stopping its workers (SIGTERM, then SIGKILL after its grace period). Not
    SIGKILL: the workers run in sessions of their own, and a launcher killed outright would
    leave them running, orphaned (distrun, their subreaper, being dead too)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
