"""Shared test helpers: run distrun and scripts as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"


def run_cmd(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 180, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def distrun(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_cmd([sys.executable, "-m", "distrun", *args], cwd=cwd, env=env, timeout=timeout)


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS
