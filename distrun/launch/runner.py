"""Starts a backend's command and supervises it until every process is gone.

- Output (output.py): workers' lines are shown live, without the launcher's `[default0]:`
  tags; torchrun's own traceback and failure table are replaced by distrun's report.
- Failure: the launcher (torchrun) stops the other ranks as soon as one fails; the
  report names the failed rank(s), host, exit code or signal, and quotes the first
  failure's error from its log.
- Hang (progress.py): with a timeout, a job that makes no progress for that long is
  stopped and said so; a rank that had already ended while the others waited is named.
- Signals: Ctrl-C / SIGTERM go to the whole job; after a grace period, everything still
  alive is killed. distrun is a child subreaper (Linux), so workers orphaned by a dying
  launcher are still found and stopped. The launcher runs under a guard (guard.py) that
  ends the whole job if distrun itself is killed: no process outlives `distrun launch`.
"""

from __future__ import annotations

import os
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

from distrun.errors import EXIT_BAD_INPUT, LaunchError
from distrun.launch import procs, shm
from distrun.launch.backends.task import FOLDER as TASK_FOLDER
from distrun.launch.failures import (
    Attempt,
    Failure,
    attempts,
    exit_records,
    free_space,
    lost_peer,
    parse_failures,
    read_error,
    taken_port,
)
from distrun.launch.meeting import Meeting, waiting_line
from distrun.launch.output import Shown, Watcher, closed, print_line
from distrun.launch.procs import GRACE_SECONDS, descendants, live_local_ranks
from distrun.launch.progress import Progress
from distrun.launch.spec import Command, LaunchSpec

__all__ = ["GRACE_SECONDS", "RunResult", "descendants", "live_local_ranks", "run"]
EXIT_FAILED = 1
EXIT_HUNG = 124
LOW_SPACE = 16 << 20  # bytes free in the log folder below which distrun warns at start
FULL = 64 << 10  # bytes free below which the log folder counts as full at the end


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
    any_output: bool = False  # whether any worker had written a line (else: still starting?)
    # each line of stdout (decimals masked): its first text, the local ranks that printed it
    printed: dict[str, tuple[str, set[int]]] = field(default_factory=dict)
    waits: list[str] = field(default_factory=list)  # where each rank was, when it hung
    restarts: int = 0  # times torchrun restarted the worker group
    earlier: list[Attempt] = field(default_factory=list)  # the attempts that failed before


def run(command: Command, spec: LaunchSpec, echo: Callable[[str, bool], None] | None = None,
        watch: Callable[[], list[str]] | None = None, shown: Shown | None = None,
        where: Callable[[], list[str]] | None = None, quiet: float | None = None
        ) -> RunResult:
    """Run and supervise `command`; `echo(line, to_stderr)` shows output (default: print);
    `watch()` is called about every second while the job runs, and the lines it returns
    are shown on standard error (the launch checks' findings); `shown`: whose output is
    shown, and how it is tagged (default: every rank's, untagged). `where()` says where
    each rank waits: asked when the job hangs (--timeout), and once when it has been
    quiet for `quiet` seconds without a timeout (the job then goes on)."""
    show = echo or print_line
    make_log_dir(spec)
    _warn_low_space(spec, show)
    procs.become_subreaper()
    started, wall_start = time.monotonic(), time.time()
    proc = _start(command)
    progress = Progress(proc.pid)
    watcher = Watcher(show, progress.output, shown)
    readers = [threading.Thread(target=watcher.pump, args=(stream, to_stderr), daemon=True)
               for stream, to_stderr in ((proc.stdout, False), (proc.stderr, True))]
    for reader in readers:
        reader.start()
    stop = _StopRequest()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    meeting = Meeting(spec)
    ticks = [_every_second(watch, show),
             _waiting_for_nodes(spec, progress, show, started, meeting)]
    try:
        result = _supervise(proc, spec, stop, progress, watcher, lambda: [t() for t in ticks],
                            where, quiet, show)
    finally:
        meeting.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop_job(proc, signal.SIGTERM, grace=GRACE_SECONDS if proc.poll() is None else 0.0)
        for reader in readers:
            reader.join(timeout=2)
    result.seconds = time.monotonic() - started
    result.printed = watcher.printed
    result.any_output = progress.anything_printed
    if result.reason == "ok" and proc.returncode != 0:
        result.reason, result.exit_code = "failed", EXIT_FAILED
    if result.reason == "failed":
        _explain_failure(result, watcher.agent_lines, spec)
    if spec.max_restarts and result.log_dir:
        result.restarts, result.earlier = attempts(result.log_dir)
    gone = shm.remove(since=wall_start)
    if gone.files:
        show(f"distrun: removed what the job left in {shm.SHM} (DeepSpeed's CPU all-reduce "
             f"buffers, never freed by DeepSpeed): {gone.describe()}", True)
    return _finish_logs(result, spec)


def make_log_dir(spec: LaunchSpec) -> None:
    """The log folder made (a LaunchError, exit 2, where it cannot be): called before
    anything else is said about the job, and again (harmlessly) by `run`."""
    if not spec.log_dir:
        return
    try:
        Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LaunchError(f"--log-dir {spec.log_dir}: cannot create it: {err.strerror}",
                          "give a folder you can write to") from None


def _warn_low_space(spec: LaunchSpec, show: Callable[[str, bool], None]) -> None:
    if not spec.log_dir:
        return
    space = free_space(spec.log_dir)
    if space is not None and space < LOW_SPACE:
        show(f"distrun: warning: only {space >> 10} KiB free for the logs in "
             f"{spec.log_dir}: every rank's output goes through it, and a rank that "
             "cannot write its output fails", True)


def _start(command: Command) -> subprocess.Popen[bytes]:
    """The launcher, under the guard, in a session of its own."""
    guard = [sys.executable, "-m", "distrun.launch.guard", str(os.getpid()), "--"]
    try:
        return subprocess.Popen(
            [*guard, *command.argv], env={**os.environ, **command.env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True)
    except OSError as err:
        raise LaunchError(f"cannot start {sys.executable}: {err.strerror}") from None


def _every_second(watch: Callable[[], list[str]] | None, show: Callable[[str, bool], None]
                  ) -> Callable[[], None]:
    """A tick that calls `watch` at most once a second and shows what it returns."""
    last = [0.0]

    def tick() -> None:
        now = time.monotonic()
        if watch is None or now - last[0] < 1.0:
            return
        last[0] = now
        for line in watch():
            show(line, True)

    return tick


WAITING_AT = (5.0, 15.0, 30.0, 60.0)  # then every 60 s


def _waiting_for_nodes(spec: LaunchSpec, progress: Progress, show: Callable[[str, bool], None],
                       started: float, meeting: Meeting) -> Callable[[], None]:
    """A multi-node job: while no worker has started here, say now and then that this node
    waits for the others, where, for how long so far and, where the rendezvous tells, how
    many nodes have joined (the count is asked in the background when a line is due and
    said once it comes)."""
    said = [0]
    asked = [False]
    meet = spec.rdzv_endpoint or f"{spec.master_addr}:{spec.master_port}"

    def tick() -> None:
        if not spec.meets_other_nodes or spec.task is not None or (
                progress.idle() >= 0 and progress.seen_worker):
            meeting.stop()
            return
        waited = time.monotonic() - started
        if not asked[0]:
            due = WAITING_AT[said[0]] if said[0] < len(WAITING_AT) else \
                WAITING_AT[-1] * (said[0] - len(WAITING_AT) + 2)
            if waited < due:
                return
            asked[0] = True
            meeting.ask()
        heard = meeting.heard()
        if heard is None:
            return
        said[0] += 1
        asked[0] = False
        show(waiting_line(spec, meet, waited, heard), True)

    return tick


def _supervise(proc: subprocess.Popen[bytes], spec: LaunchSpec, stop: _StopRequest,
               progress: Progress, watcher: Watcher, tick: Callable[[], object],
               where: Callable[[], list[str]] | None = None, quiet: float | None = None,
               show: Callable[[str, bool], None] = print_line) -> RunResult:
    """Wait for the job to end, to be interrupted, or (with a timeout) to hang. Without a
    timeout, a job quiet for `quiet` seconds gets one report of where each rank is (and
    another after it has printed again and gone quiet again)."""
    reported = False
    while proc.poll() is None:
        time.sleep(0.1)
        tick()
        if stop.signum is not None:
            watcher.quiet = True
            _stop_job(proc, stop.signum)
            return RunResult(128 + stop.signum, "interrupted", log_dir=spec.log_dir,
                             detail=signal.Signals(stop.signum).name)
        idle = progress.idle()
        if spec.timeout is None and quiet and where is not None:
            if idle > quiet and not reported and progress.computing():
                progress.output(None)  # a rank computes: slow, not hung; count again
            elif idle > quiet and not reported:
                reported = True
                lines = where()
                show(f"distrun: warning: no output from any rank for {quiet:g} s (still "
                     "waiting; a slow step is not a hang: nothing is stopped)", True)
                for line in lines or ["  (no rank could say where it is: run with the "
                                      "default check, not --no-check)"]:
                    show(line, True)
            elif idle < quiet / 2:
                reported = False
        if spec.timeout is not None and idle > spec.timeout:
            live = live_local_ranks(proc.pid)
            waits = where() if where is not None else []
            watcher.quiet = True
            _stop_job(proc, signal.SIGTERM)
            first = spec.task.rank - spec.task.local_rank if spec.task else (
                None if spec.meets_other_nodes else 0)
            return RunResult(
                EXIT_HUNG, "hung", log_dir=spec.log_dir,
                detail=f"no output from any rank for {spec.timeout:g} s",
                ended_early=_ended_early(_local_ranks(spec), live, first),
                waits=waits)
    return RunResult(0, "ok", log_dir=spec.log_dir)


def _explain_failure(result: RunResult, agent_lines: list[str], spec: LaunchSpec) -> None:
    """Which ranks failed and why (torchrun's table, the first failure's log), or the port
    another process took, or the launcher's last lines."""
    agent_output = "\n".join(agent_lines)
    result.failures = parse_failures(agent_output)
    if spec.task is not None and spec.log_dir:
        result.failures = exit_records(spec.log_dir, TASK_FOLDER)
    elif spec.launcher in ("deepspeed", "ray") and spec.log_dir:
        result.failures = exit_records(spec.log_dir, spec.launcher)
    if spec.log_dir:
        for failure in result.failures:  # the others' too: whether they failed on their own
            failure.error = read_error(spec.log_dir, failure.local_rank)
            if spec.task is not None and lost_peer(failure.error) is not None:
                failure.root_cause = False  # the first failure is another task's
    port = taken_port(agent_output)
    if not result.failures and port is not None:
        result.reason, result.exit_code, result.detail = "port-taken", EXIT_BAD_INPUT, str(port)
    elif not result.failures:
        result.detail = "\n".join(agent_lines[-15:])
    failed = {f.local_rank: f.rank - f.local_rank for f in result.failures}
    result.ended_early = _ended_early(_local_ranks(spec), set(failed),
                                      next(iter(failed.values()), None))


def _finish_logs(result: RunResult, spec: LaunchSpec) -> RunResult:
    """Note a full log disk; remove a temporary log folder after a clean run."""
    if spec.log_dir:
        space = free_space(spec.log_dir)
        result.log_space = space if space is not None and space < FULL else None
    if result.reason == "ok" and spec.log_dir and not spec.keep_logs and not closed:
        shutil.rmtree(spec.log_dir, ignore_errors=True)
        result.log_dir = None
    return result


def _local_ranks(spec: LaunchSpec) -> list[int]:
    """The local ranks this distrun runs: its node's, or a SLURM task's one."""
    if spec.task is not None:
        return [spec.task.local_rank]
    return list(range(spec.ranks_here if isinstance(spec.nproc_per_node, int) else 0))


def _ended_early(local_ranks: list[int], still: set[int], offset: int | None,
                 ) -> list[tuple[int | None, int]]:
    """The local ranks (with their global rank where `offset` tells it) not among `still`:
    the ranks that failed, or that were still running. Nothing when `still` is empty."""
    if not still:
        return []
    return [(None if offset is None else offset + local, local)
            for local in local_ranks if local not in still]


class _StopRequest:
    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum


def _stop_job(proc: subprocess.Popen[bytes], signum: int, grace: float = GRACE_SECONDS) -> None:
    """Signal the launcher and every process below it; kill what is left after `grace`."""
    if grace <= 0 and proc.poll() is not None:
        procs.kill_all(descendants(os.getpid()))
        return
    for pid in descendants(proc.pid):
        procs.send(pid, signum)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    procs.kill_all(descendants(os.getpid()))
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        procs.send(proc.pid, signal.SIGKILL)
        proc.wait()
