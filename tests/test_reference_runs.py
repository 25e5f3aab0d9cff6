"""tests/reference.py: a reference run is kept for the session and given to the next test
with the same command, environment and folder; anything else runs again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import reference

COUNTING = """\
import os, pathlib, sys
counter = pathlib.Path(os.environ["COUNTER"])
counter.write_text(counter.read_text() + "x")
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/made.txt").write_text(os.environ["OUT_PATH"])
print("ran in", os.getcwd(), "wrote", os.environ["OUT_PATH"])
sys.exit(int(os.environ.get("FAIL", "0")))
"""


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(reference, "CACHE", [tmp_path / "kept"])
    counter = tmp_path / "counter"
    counter.write_text("")
    return counter


def folder_with_script(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "count.py").write_text(COUNTING)
    return folder


def run(folder: Path, counter: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return reference.run_in([sys.executable, str(folder / "count.py")], folder,
                            {"COUNTER": str(counter), "OUT_PATH": str(folder / "single.pt"),
                             **env})


def test_the_same_run_in_another_folder_runs_once(tmp_path: Path, kept: Path) -> None:
    first, second = (folder_with_script(tmp_path, name) for name in ("a", "b"))
    one, two = run(first, kept), run(second, kept)
    assert kept.read_text() == "x"  # the second is the kept run
    assert one.returncode == two.returncode == 0
    # each output names its own folder, as if the run had been there
    assert two.stdout.strip() == f"ran in {second} wrote {second / 'single.pt'}"
    assert one.stdout.strip() == f"ran in {first} wrote {first / 'single.pt'}"
    # the files the run wrote are in both folders (their contents as the run wrote them)
    for folder in (first, second):
        made = (folder / "out" / "made.txt").read_text()
        assert made.startswith(str(tmp_path / "kept")) and made.endswith("/run/single.pt")


def test_another_file_environment_or_failure_runs_again(tmp_path: Path, kept: Path) -> None:
    first = folder_with_script(tmp_path, "a")
    run(first, kept)
    other_file = folder_with_script(tmp_path, "b")
    (other_file / "data.txt").write_text("another data set")
    run(other_file, kept)
    assert kept.read_text() == "xx"
    run(folder_with_script(tmp_path, "c"), kept, BATCH_SIZE="8")
    assert kept.read_text() == "xxx"
    failing = folder_with_script(tmp_path, "d")
    assert run(failing, kept, FAIL="3").returncode == 3
    failed_again = run(folder_with_script(tmp_path, "e"), kept, FAIL="3")
    assert failed_again.returncode == 3 and kept.read_text() == "xxxxx"  # not kept
    assert "ran in " + str(tmp_path / "kept") in failed_again.stdout  # where it really ran


def test_without_a_session_folder_it_runs_in_place(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "CACHE", [])
    counter = tmp_path / "counter"
    counter.write_text("")
    folder = folder_with_script(tmp_path, "a")
    assert run(folder, counter).stdout.strip() == f"ran in {folder} wrote {folder}/single.pt"
    assert (folder / "out" / "made.txt").exists()
