"""A `distrun launch` job running in the background for a test: its output collected as it
comes, so the test can wait for a line (an event) instead of sleeping for a while."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path


class Job:
    """`distrun launch ARGS` running in the background, its output collected as it comes."""

    def __init__(self, folder: Path, *args: str, env: dict[str, str] | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "distrun", "launch", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                        for stream, into in ((self.proc.stdout, self.out),
                                             (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: object, into: list[str]) -> None:
        for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
            into.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.out):
                match = re.search(pattern, line)
                if match:
                    return match
            if self.proc.poll() is not None and not any(r.is_alive() for r in self.readers):
                break
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"no line matching {pattern!r}: {self.out[-5:]} {self.err[-20:]}")

    def finish(self, timeout: float) -> tuple[int, str, float]:
        """Exit code, stderr, and the seconds it took to end from now."""
        since = time.monotonic()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"still running after {timeout} s: {self.err[-20:]}") from None
        for reader in self.readers:
            reader.join(timeout=5)
        return code, "\n".join(self.err), time.monotonic() - since
