"""Starts a backend's command, forwards Ctrl-C / SIGTERM to it, and reports how it ended."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from types import FrameType

from distrun.errors import EXIT_JOB_FAILED, LaunchError
from distrun.launch.spec import Command


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def run(command: Command) -> int:
    """Run the command in its own process group; stop the whole group on a signal."""
    env = {**os.environ, **command.env}
    try:
        proc = subprocess.Popen(command.argv, env=env, start_new_session=True)
    except OSError as err:
        raise LaunchError(f"cannot start {command.argv[0]}: {err.strerror}") from None

    def forward(signum: int, _frame: FrameType | None) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if code != 0:
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        raise LaunchError(f"the job failed ({how}); the first failing rank is named above",
                          exit_code=EXIT_JOB_FAILED)
    return 0
