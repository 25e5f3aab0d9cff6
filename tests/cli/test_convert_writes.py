"""What `distrun convert` writes (distrun/writes.py), issue 27: a backup that is
the bytes read, a project rewritten in place as one transaction, symlinks followed, the
user's umask and owner kept, pipes refused, a killed run's leftovers undone. The fault
injection (kills, two runs at once, a full disk) is tests/hardening/test_write_faults.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distrun.errors import InputError
from distrun.files import FileWrite, write_files
from tests.cli.convert_helpers import TRAIN, assert_error, run, snapshot

UTILS = """\
import torch


def make_loader(ds):
    return torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
"""
ENTRY = TRAIN.replace("loader = DataLoader(data, batch_size=16, shuffle=True)",
                      "loader = make_loader(data)").replace(
    "import torch\n", "import torch\nfrom utils import make_loader\n", 1)


def _project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "train.py").write_text(ENTRY)
    (folder / "utils.py").write_text(UTILS)
    return folder


def _temps(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if ".distrun-" in p.name or
            p.name.endswith(".tmp")]


def test_a_file_changed_since_it_was_read_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "r.py"
    target.write_bytes(b"print('changed meanwhile')\n")
    with pytest.raises(InputError, match="changed since distrun read it"):
        write_files([FileWrite(str(target), b"new\n", backup=True, force=True,
                               original=b"print('as read')\n")])
    assert target.read_bytes() == b"print('changed meanwhile')\n"
    assert sorted(os.listdir(tmp_path)) == ["r.py"]


def test_a_stray_backup_stops_a_project_before_any_write(work: Path) -> None:
    proj = _project(work / "proj")
    (proj / "utils.py.orig").write_text("# an older backup\n")
    before = snapshot(proj)
    assert "utils.py.orig already exists" in assert_error(
        run("convert", "proj/train.py", "--in-place"))
    assert snapshot(proj) == before


def test_a_failure_mid_project_puts_back_what_was_replaced(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = _project(work / "proj")
    before = snapshot(proj)
    real = os.replace
    calls = []

    def failing(src: object, dst: object) -> None:
        calls.append(dst)
        if len(calls) == 3:  # the journal, train.py, then utils.py fails
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", failing)
    err = assert_error(run("convert", "proj/train.py", "--in-place"))
    assert "utils.py: cannot write: No space left on device" in err and "put back" in err
    monkeypatch.setattr(os, "replace", real)
    assert snapshot(proj) == before
    result = run("convert", "proj/train.py", "--in-place")  # the next run converts both
    assert result.exit_code == 0, result.output
    assert (proj / "utils.py.orig").read_text() == UTILS
    assert "DistributedSampler" in (proj / "utils.py").read_text()


def test_an_empty_backup_left_by_a_failed_run_is_replaced(work: Path) -> None:
    (work / "train.py.orig").write_bytes(b"")
    assert run("convert", "train.py", "--in-place").exit_code == 0
    assert (work / "train.py.orig").read_text() == TRAIN


def test_in_place_through_a_symlink_rewrites_its_target(work: Path) -> None:
    (work / "link.py").symlink_to("train.py")
    assert run("convert", "link.py", "--in-place").exit_code == 0
    assert (work / "link.py").is_symlink()
    assert "DistributedDataParallel" in (work / "train.py").read_text()
    assert (work / "train.py.orig").read_text() == TRAIN


def test_new_files_get_the_umask_mode(work: Path) -> None:
    old = os.umask(0o022)
    try:
        proj = _project(work / "proj")
        assert run("convert", "proj/train.py").exit_code == 0
        assert (work / "proj_ddp").stat().st_mode & 0o777 == 0o755
        write_files([FileWrite(str(work / "new.py"), b"x = 1\n")])
        assert (work / "new.py").stat().st_mode & 0o777 == 0o644
        assert proj.exists()
    finally:
        os.umask(old)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file away")
def test_in_place_as_root_keeps_the_owner(work: Path) -> None:
    os.chown(work / "train.py", 4321, 4321)
    assert run("convert", "train.py", "--in-place").exit_code == 0
    for name in ("train.py", "train.py.orig"):
        st = (work / name).stat()
        assert (st.st_uid, st.st_gid) == (4321, 4321), name


def test_a_pipe_is_refused_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f.py")
    proc = subprocess.run([sys.executable, "-m", "distrun", "convert", "f.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "not a regular file" in assert_error(proc)


def test_a_killed_runs_leftovers_are_removed(work: Path) -> None:
    dead = 2 ** 22 + 12345  # above pid_max's default: no such process
    stray = work / f".train.py.distrun-{dead}-abcdef.tmp"
    stray.write_text("half")
    staging = work / f".proj_ddp.distrun-{dead}-0a0b0c"
    staging.mkdir()
    result = run("convert", "train.py", "--in-place")
    assert result.exit_code == 0
    assert f"removed {stray}" in result.stderr
    assert not stray.exists() and not staging.exists()
    assert _temps(work) == []


def test_the_notebook_itself_is_not_replaced_even_with_force(work: Path) -> None:
    nb = work / "nb.ipynb"
    nb.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    before = nb.read_bytes()
    assert_error(run("convert", "nb.ipynb", "-o", "nb.ipynb", "--force"))
    assert_error(run("convert", "nb.ipynb", "-o", "./nb.ipynb", "--force"))
    assert nb.read_bytes() == before


def test_an_older_runs_leftovers_are_named_with_the_command(work: Path) -> None:
    old = work / ".train.py.k2j4_x9q.tmp"
    old.write_text("half")
    result = run("convert", "train.py", "--in-place")
    assert result.exit_code == 0
    assert f"remove it with: rm -r {old}" in result.stderr
    assert old.exists()


def test_code_nested_too_deeply_is_bad_input(work: Path) -> None:
    (work / "deep.py").write_text("x = " + " + ".join(["1"] * 5000) + "\n")
    assert "nested too deeply" in assert_error(run("convert", "deep.py", "--in-place"))
    assert sorted(os.listdir(work)) == ["deep.py", "train.py"]


def test_a_project_module_linked_from_outside_the_folder_is_refused(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """`utils.py -> ../shared/utils.py`: exit 2 naming the link, nothing written (it was
    an internal error, exit 70)."""
    project = _project(tmp_path / "proj")
    shared = tmp_path / "shared"
    shared.mkdir()
    (project / "utils.py").rename(shared / "utils.py")
    (project / "utils.py").symlink_to(shared / "utils.py")
    before = snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    message = assert_error(run("convert", "proj/train.py"))
    assert "proj/utils.py: a link to" in message and "outside the project's folder" in message
    assert snapshot(tmp_path) == before
