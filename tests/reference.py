"""Runs each single-process reference run once per test session, shared by the workers.

Many end-to-end tests run the same original script on one process with the same
environment (eval_loop.py's original, batch 64, by ten tests): the first run is kept in a
folder shared by the session's pytest-xdist workers, keyed by what decides its result
(the command line, the environment given, the name and bytes of every file of the test's
folder), and every later test with the same key gets its output and files without
starting Python and torch again. A file lock per key makes a worker wait for the other's
run rather than run it twice. Only runs that exit 0 are kept: a failure runs again.

The folder's own path stands for itself in the key and in the kept output (a run in the
shared folder prints the test's folder, as if it had run there).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import run_cmd

CACHE: list[Path] = []  # the session's folder, set by tests/conftest.py; none: no caching
HERE = "{FOLDER}"


def session_cache_root(basetemp: Path) -> Path:
    """The folder every worker of this session sees: xdist gives each worker its own
    basetemp under one shared by the session (a plain run: basetemp itself)."""
    root = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    return root / "reference-runs"


def _files(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under `folder` (bytecode caches aside)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _moved(value: str, old: Path | str, new: Path | str) -> str:
    """`value` with the folder `old` (itself, not a longer name it begins) as `new`."""
    return re.sub(re.escape(str(old)) + r"(?=/|$)", lambda _: str(new), value)


def _key(args: list[str], folder: Path, env: dict[str, str]) -> str:
    what = {"args": [_moved(a, folder, HERE) for a in args],
            "env": {k: _moved(v, folder, HERE) for k, v in sorted(env.items())},
            "files": _files(folder)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def run_in(args: list[str], folder: Path, env: dict[str, str]
           ) -> subprocess.CompletedProcess[str]:
    """`args` run in `folder` with `env` (as tests.conftest.run_cmd runs them), or the
    kept result of the same run earlier in the session: its output, and the files it
    wrote copied into `folder`."""
    if not CACHE:
        return run_cmd(args, cwd=folder, env=env)
    root = CACHE[0]
    root.mkdir(parents=True, exist_ok=True)
    key = _key(args, folder, env)
    entry = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = entry / "result.json"
        if not kept.exists():
            result = _run_there(args, folder, env, entry / "run")
            if result.returncode != 0:  # not kept; the test sees where it ran
                return result
            kept.write_text(json.dumps({"returncode": 0, "stdout": result.stdout,
                                        "stderr": result.stderr}))
        before = _files(folder)
        for rel, digest in _files(entry / "run").items():
            if before.get(rel) != digest:  # written by the run: brought to the test's folder
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(entry / "run" / rel, folder / rel)
    data = json.loads(kept.read_text())
    mine = str(folder)
    return subprocess.CompletedProcess(args, data["returncode"],
                                       data["stdout"].replace(HERE, mine),
                                       data["stderr"].replace(HERE, mine))


def _run_there(args: list[str], folder: Path, env: dict[str, str], there: Path
               ) -> subprocess.CompletedProcess[str]:
    """The run in a copy of `folder` at `there`; its output with `there` written as
    HERE (kept so), or as itself where the run failed (so a failure says where it ran)."""
    if there.exists():
        shutil.rmtree(there)
    shutil.copytree(folder, there, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    theirs = str(there)
    result = run_cmd([_moved(a, folder, there) for a in args], cwd=there,
                     env={k: _moved(v, folder, there) for k, v in env.items()})
    if result.returncode == 0:
        result.stdout = result.stdout.replace(theirs, HERE)
        result.stderr = result.stderr.replace(theirs, HERE)
    return result
