"""Shared test helpers: run distrun and scripts as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Helper modules that assert like tests do: pytest rewrites their asserts too (it does so
# by itself only for test_*.py and conftest.py), so a failure shows what was compared.
pytest.register_assert_rewrite("tests.cli.convert_helpers", "tests.e2e.resume")

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"

# One thread per process for torch, in the test processes and in every process they start,
# as torchrun gives each of its workers: torch's default (one per core) makes each tiny
# operation wake and wait for threads that the other xdist worker's processes need; the
# minGPT project's original run took 92 s with it, 10 s with one thread. A value already
# set is kept (tests of what distrun does with it set it themselves, or clear it).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def run_cmd(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 180, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def distrun(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_cmd([sys.executable, "-m", "distrun", *args], cwd=cwd, env=env, timeout=timeout)


def marked_processes(marker: Path) -> dict[int, str]:
    """Live processes (pid: command line) that mention `marker` (the test's own folder)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(marker) in cmdline and state != "Z":
            found[int(entry.name)] = cmdline
    return found


def leftovers(marker: Path) -> list[str]:
    """Command lines of live processes that mention `marker` (the test's own folder)."""
    return list(marked_processes(marker).values())


@pytest.fixture(scope="session", autouse=True)
def _reference_runs_kept_for_the_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """tests/reference.py keeps single-process runs in a folder the workers share."""
    from tests import reference

    reference.CACHE[:] = [reference.session_cache_root(tmp_path_factory.getbasetemp())]


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS


@pytest.fixture(scope="session", autouse=True)
def _no_shared_memory_left_behind() -> Iterator[None]:
    """Jobs that DeepSpeed's CPU all-reduce ran in (torchrun and deepspeed started by the
    tests themselves, not through distrun launch, which cleans up) leave tens of MB each
    in /dev/shm: a suite left about 800 MB, and a few runs filled the machine's memory.
    What this session's jobs left, and nobody holds, is removed at its end."""
    from distrun.launch import shm

    started = time.time()
    yield
    shm.remove(since=started)
