"""What the Ray driver prints: the ranks' lines, sorted from Ray's own.

Ray prints the workers' output in the driver, each line behind its `(ActorName pid=N,
ip=A)` prefix, with `print` on `sys.stdout` or `sys.stderr` (the worker's stream). The
driver replaces both with `RankLines` streams before it imports Ray, so every line Ray
prints there passes through `RayOutput`:

- a rank's line (ray_worker.py tags it `[default<RANK>]:`) goes on, without Ray's prefix,
  to the driver's real stream, where distrun's runner reads it as it reads torchrun's;
  its standard error is also kept in LOG_DIR/ray/attempt_0/<RANK>/stderr.log, where
  the failure report reads a failed rank's error;
- the line a rank ends each stream with (END_OF_OUTPUT) is noted, not shown: the driver
  waits for them before it stops Ray, so no line is lost in Ray's forwarding;
- everything else (Ray's own logs, its controller's, its workers' own) goes to
  LOG_DIR/ray/ray.log only: the driver says in its own words what the user needs.

Also here: the exit records (`exit.json`, as rankrun.py writes them) of a failed job.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from pathlib import Path
from typing import IO, TextIO

from distrun.launch.ray_worker import END_OF_OUTPUT

_RAY_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?:[^()]*? )?pid=[^()]*\)(?:\x1b\[[0-9;]*m)? ")
_RANK = re.compile(r"^\[default(\d+)\]:")
_END = re.compile(re.escape(END_OF_OUTPUT) + r" (-?\d+) on (.*)$")
# Ray Train's controller, once the workers run: "- (ip=10.0.0.2, pid=123) world_rank=1, ..."
_PLACED = re.compile(r"\(ip=(?P<ip>[^,()]+), pid=\d+\) world_rank=(?P<rank>\d+)\b")
FOLDER = "ray"  # under the log folder; attempt_0/<RANK>/ as failures.py reads it


class RayOutput:
    """The driver's output, sorted: see the module's docstring."""

    def __init__(self, log_dir: str | None, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.folder = Path(log_dir, FOLDER) if log_dir else None
        self.lock = threading.Condition()
        self.ended: set[tuple[int, bool]] = set()  # (rank, is_err): END_OF_OUTPUT seen
        self.exits: dict[int, tuple[int, str]] = {}  # rank -> exit code, host (said there)
        self.hosts: dict[int, str] = {}  # rank -> its node's address, as Ray Train said
        self.logs: dict[int, IO[str]] = {}
        self.ray_log: IO[str] | None = None

    def line(self, text: str, is_err: bool) -> None:
        """One line Ray printed on the driver's stdout or stderr."""
        plain = _RAY_PREFIX.sub("", text, count=1)
        tag = _RANK.match(plain)
        end = _END.match(plain, tag.end()) if tag else None
        with self.lock:
            if tag is None:
                self._ray_line(text)
            elif end is not None:
                self.ended.add((int(tag[1]), is_err))
                self.exits[int(tag[1])] = (int(end[1]), end[2])
                self.lock.notify_all()
            else:
                _show(self.err if is_err else self.out, plain)
                if is_err:
                    self._keep(int(tag[1]), plain[tag.end():])

    def say(self, text: str) -> None:
        """A line of the driver's own, on its real standard error."""
        with self.lock:
            _show(self.err, f"distrun: ray: {text}")

    def wait_ends(self, ranks: set[int], seconds: float) -> set[int]:
        """Wait (at most `seconds`) for both streams of `ranks` to end; the ranks whose
        output did not all come."""
        wanted = {(rank, is_err) for rank in ranks for is_err in (False, True)}
        deadline = time.monotonic() + seconds
        with self.lock:
            while not wanted <= self.ended and time.monotonic() < deadline:
                self.lock.wait(timeout=max(0.0, deadline - time.monotonic()))
            return {rank for rank, is_err in wanted - self.ended}

    def exit_of(self, rank: int) -> tuple[int, str] | None:
        """The exit code and host of a rank whose script ended (not stopped by Ray)."""
        with self.lock:
            return self.exits.get(rank)

    def record_exit(self, rank: int, host: str, exit_code: int, stopped: bool = False,
                    error: str = "") -> None:
        """The rank's `exit.json` (failures.exit_records reads it); `error`, its error as
        Ray returned it, is added to its stderr.log when that holds no traceback (lines
        Ray did not forward in time)."""
        folder = self._rank_folder(rank)
        if folder is None:
            return
        with self.lock:
            log = self.logs.pop(rank, None)
            if log is not None:
                log.close()
        stderr = folder / "stderr.log"
        if error and "Traceback (most recent call last)" not in _read(stderr):
            with stderr.open("a", encoding="utf-8") as stream:
                stream.write(error.rstrip("\n") + "\n")
        record = {"rank": rank, "local_rank": rank, "host": host, "exit_code": exit_code,
                  "time": time.time(), "stopped": stopped}
        (folder / "exit.json").write_text(json.dumps(record) + "\n", encoding="utf-8")

    def close(self) -> None:
        with self.lock:
            for log in [*self.logs.values(), *([self.ray_log] if self.ray_log else [])]:
                log.close()
            self.logs.clear()
            self.ray_log = None

    def _keep(self, rank: int, text: str) -> None:
        log = self.logs.get(rank)
        if log is None:
            folder = self._rank_folder(rank)
            if folder is None:
                return
            log = self.logs[rank] = (folder / "stderr.log").open("a", encoding="utf-8")
        log.write(text + "\n")
        log.flush()

    def host(self, rank: int, default: str) -> str:
        """The address of the node Ray Train placed `rank` on (`default` if not said)."""
        with self.lock:
            return self.hosts.get(rank, default)

    def _ray_line(self, text: str) -> None:
        placed = _PLACED.search(text)
        if placed is not None:
            self.hosts[int(placed["rank"])] = placed["ip"]
        if self.folder is None:
            return
        if self.ray_log is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.ray_log = (self.folder / "ray.log").open("a", encoding="utf-8")
        self.ray_log.write(text + "\n")
        self.ray_log.flush()

    def _rank_folder(self, rank: int) -> Path | None:
        if self.folder is None:
            return None
        folder = self.folder / "attempt_0" / str(rank)
        folder.mkdir(parents=True, exist_ok=True)
        return folder


class RankLines(io.TextIOBase):
    """A text stream that hands `output` each complete line written to it."""

    def __init__(self, output: RayOutput, is_err: bool, real: TextIO) -> None:
        super().__init__()
        self.output, self.is_err, self.real = output, is_err, real
        self.pending = ""
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self.output.line(line, self.is_err)
        return len(text)

    def flush(self) -> None:
        with self.lock:
            line, self.pending = self.pending, ""
        if line:
            self.output.line(line, self.is_err)

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


def _show(stream: TextIO, line: str) -> None:
    try:
        stream.write(line + "\n")
        stream.flush()
    except (BrokenPipeError, ValueError):
        pass


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
