"""When a job last made progress, for the hang detector (`--timeout`).

Progress is an event: a line of a worker's output, a worker starting, a worker ending.
The launcher's own log lines are not (a node retrying a wrong address prints them for
ever). Nor is silence while the job is still starting: the launcher and each worker
import torch and set up before they can print anything, which on a loaded machine can
take longer than a short --timeout. So CPU time spent by a process that is starting up
(the launcher before any worker exists, a worker before its first line) counts as
progress, up to STARTUP_CPU_SECONDS each; a process waiting (in a rendezvous, in a
collective, in a sleep) uses next to none, and its silence counts. The share of CPU is
measured over the last BUSY_WINDOW seconds, not per sample: a waiting launcher wakes up
now and then for a short burst (c10d's rendezvous heartbeat, every 5 s, 30 to 50 ms),
which is not start-up and must not keep a node that waits for the others from ever
reaching its --timeout. A worker's first
STARTUP_GRACE_SECONDS (wall clock, from when it is first seen) before its first line are
start-up whatever its CPU use (imports read from a cold disk, a data set loaded over the
network): a rank's silence counts from its first line, or from the end of that grace.
Workers are known by the LOCAL_RANK their launcher started them with; Ray's workers get
theirs only once they run (--launcher ray), so there the job has started once a rank has
written a line, and from then on only the ranks' output is progress (Ray's own processes
stay busy for as long as the cluster runs).
"""

from __future__ import annotations

import threading
import time

from distrun.launch import procs

SAMPLE_SECONDS = 0.5  # how often the processes are looked at
BUSY_SHARE = 0.1  # CPU per second of wall time above which starting processes are busy
BUSY_WINDOW = 2.0  # seconds over which that share is measured
COMPUTING_SHARE = 0.2  # CPU per second above which a worker computes (not waits)
STARTUP_CPU_SECONDS = 60.0  # CPU a process may spend starting up before silence counts
STARTUP_GRACE_SECONDS = 30.0  # a worker's wall-clock start-up before its first line


class Progress:
    """The time of the last progress of the job whose processes are below `root`."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.printed: set[int] = set()  # local ranks that have written a line
        self.ranks: set[int] = set()  # local ranks with a live worker at the last sample
        self.seen_worker = False
        # (when, starting process -> its CPU seconds then), the samples of the last
        # BUSY_WINDOW seconds
        self.cpu: list[tuple[float, dict[int, float]]] = []
        self.born: dict[int, float] = {}  # worker pid -> when it was first seen
        self.sampled = 0.0

    def output(self, local_rank: int | None) -> None:
        """A line of the job's output (of worker `local_rank`, where the tag tells)."""
        with self.lock:
            self.last = time.monotonic()
            if local_rank is not None:
                self.printed.add(local_rank)

    @property
    def anything_printed(self) -> bool:
        """Whether any worker has written a line yet (else the job was still starting)."""
        with self.lock:
            return bool(self.printed)

    def idle(self) -> float:
        """Seconds since the last progress (the processes are looked at first, at most
        every SAMPLE_SECONDS)."""
        now = time.monotonic()
        if now - self.sampled >= SAMPLE_SECONDS:
            self._sample(now)
        with self.lock:
            return time.monotonic() - self.last

    def _sample(self, now: float) -> None:
        workers = {pid: rank for pid in procs.descendants(self.root)
                   if (rank := procs.local_rank(pid)) is not None}
        ranks = set(workers.values())
        with self.lock:
            changed = ranks != self.ranks
            self.ranks = ranks
            self.seen_worker = self.seen_worker or bool(ranks) or bool(self.printed)
            starting = [pid for pid, rank in workers.items() if rank not in self.printed]
            self.born = {pid: self.born.get(pid, now) for pid in workers}
            in_grace = any(now - self.born[pid] < STARTUP_GRACE_SECONDS for pid in starting)
            if not self.seen_worker:
                starting = [self.root, *procs.descendants(self.root)]
        busy = self._busy(starting, now)
        self.sampled = now
        if changed or busy or in_grace:
            with self.lock:
                self.last = max(self.last, now)

    def computing(self, seconds: float = 1.0) -> bool:
        """Whether a worker uses the CPU now (measured over `seconds`): a rank that is
        merely slow (a long step or evaluation without output) computes; a rank that
        waits (in a collective on gloo, in a sleep, in a lock) does not."""
        workers = [pid for pid in procs.descendants(self.root)
                   if procs.local_rank(pid) is not None]
        before = {pid: procs.cpu_seconds(pid) for pid in workers}
        time.sleep(seconds)
        return any(procs.cpu_seconds(pid) - cpu >= COMPUTING_SHARE * seconds
                   for pid, cpu in before.items())

    def _busy(self, starting: list[int], now: float) -> bool:
        """Whether the starting processes used a BUSY_SHARE of the CPU over the last
        BUSY_WINDOW seconds (each counted while it has used under STARTUP_CPU_SECONDS)."""
        cpu = {pid: procs.cpu_seconds(pid) for pid in starting}
        self.cpu.append((now, cpu))
        while len(self.cpu) > 2 and now - self.cpu[1][0] >= BUSY_WINDOW:
            del self.cpu[0]
        since, before = self.cpu[0]
        spent = sum(cpu[pid] - before[pid] for pid in cpu
                    if pid in before and before[pid] < STARTUP_CPU_SECONDS)
        return now > since and spent >= BUSY_SHARE * (now - since)
