"""The job's guard: the launcher's parent, which ends the whole job when distrun dies.

`python -m distrun.launch.guard DISTRUN_PID -- LAUNCHER [ARGS...]`. distrun starts it in a
session of its own; the guard starts the launcher (torchrun, accelerate) as its child, in
a process group of its own, waits for it and exits as it did. It is a child subreaper:
workers a dying launcher leaves behind are re-parented to it, not to init.

If distrun goes away without stopping the job (SIGKILL, a crash), the guard does what
distrun's stop path does: SIGTERM to the launcher's process group and to every worker's
(torch elastic starts each worker in a session of its own, out of the launcher's reach
of a group signal), then SIGKILL to whatever is left after the grace period. A launcher
left to stop its workers itself can take many seconds under load (torchrun's own grace
is 30 s); the job would outlive distrun.

SIGINT, SIGTERM and SIGHUP sent to the guard do nothing: distrun signals the launcher and
the workers itself. (A handler, not SIG_IGN, so the launcher does not inherit them
ignored.) Imports only the standard library and procs.py, so it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

from distrun.launch import procs

POLL_SECONDS = 0.1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[0].isdigit() or argv[1] != "--":
        sys.stderr.write("usage: python -m distrun.launch.guard PARENT_PID -- COMMAND...\n")
        return 2
    parent, command = int(argv[0]), argv[2:]
    procs.become_subreaper()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _ignore)
    guard = _Guard(_spawn(command))
    while guard.reap() is None:
        if not guard.ending and os.getppid() != parent:  # distrun is gone: end the job
            guard.end_job()
        time.sleep(POLL_SECONDS)
    return _exit_like(guard.status or 0)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """SIGINT/SIGTERM/SIGHUP: distrun signals the launcher and the workers directly."""


def _spawn(command: list[str]) -> int:
    """Start `command` in a process group of its own; SIGTERM to it if the guard dies."""
    pid = os.fork()
    if pid == 0:  # the child: becomes the launcher
        try:
            os.setpgid(0, 0)
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            procs.die_with_parent(signal.SIGTERM)
            os.execvp(command[0], command)
        except OSError as err:
            os.write(2, f"distrun: cannot start {command[0]}: {err.strerror}\n".encode())
        os._exit(127)
    return pid


def _exit_like(status: int) -> int:
    """The launcher's exit code, or its death by the same signal."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal that does not end a process
    return code


class _Guard:
    def __init__(self, launcher: int) -> None:
        self.launcher = launcher
        self.status: int | None = None  # the launcher's wait status, once it ended
        self.ending = False

    def reap(self) -> int | None:
        """Reap every child that ended (orphans re-parented here too); the launcher's wait
        status once it has ended, else None."""
        while self.status is None:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == self.launcher:
                self.status = status
        return self.status

    def end_job(self, grace: float = procs.GRACE_SECONDS) -> None:
        """SIGTERM to the launcher's group and to every process below the guard (and their
        groups); SIGKILL to what is left after `grace` seconds."""
        self.ending = True
        self.signal_job(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and procs.descendants(os.getpid()):
            self.reap()
            time.sleep(0.05)
        self.signal_job(signal.SIGKILL)

    def signal_job(self, signum: int) -> None:
        own = os.getpgid(0)
        pids = procs.descendants(os.getpid())
        groups = {self.launcher} | {
            g for pid in pids if (g := procs.process_group(pid)) is not None}
        for group in groups - {own}:
            procs.send_group(group, signum)
        for pid in pids:
            procs.send(pid, signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
