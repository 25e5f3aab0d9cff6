"""Fixtures for the tests under tests/cli."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.convert_helpers import TRAIN


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch folder, made the current directory, holding train.py."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path
