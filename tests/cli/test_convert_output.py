"""`distrun convert -o`: the same rules for a script, a project and a notebook.

An existing folder or a path ending in `/` is a folder to write into (made when missing);
a missing folder on the way to a file is made; a project's -o is a folder, never a `.py`
file; the `next:` line names the file written. And the core behind it: one request in,
one outcome out, nothing printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrun.convert.request import ConvertRequest, convert_request, detect_input, write_outcome
from distrun.errors import ConvertError
from tests.cli.convert_helpers import TRAIN, assert_error, run, snapshot
from tests.conftest import distrun as run_distrun

SPAWNS = ("import torch.multiprocessing as mp\n\n\ndef work(rank):\n    print(rank)\n\n\n"
          "if __name__ == '__main__':\n    mp.spawn(work, nprocs=2)\n")


def next_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("next: "))


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """proj/train.py importing proj/helpers.py: a project; the current directory holds it."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helpers.py").write_text("def seed():\n    return 0\n")
    (folder / "train.py").write_text("import helpers\n" + TRAIN.replace(
        "torch.manual_seed(0)", "torch.manual_seed(helpers.seed())"))
    return folder


@pytest.fixture
def nb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """train.ipynb, one code cell holding TRAIN."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.ipynb"
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": TRAIN.splitlines(keepends=True)}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


# --------------------------------------------------------------------------- a script


def test_script_into_a_missing_folder(work: Path) -> None:
    result = run("convert", "train.py", "-o", "build/")
    assert result.exit_code == 0, result.output
    assert (work / "build").is_dir() and (work / "build" / "train_ddp.py").is_file()
    assert "train.py -> build/train_ddp.py:" in result.stdout
    assert next_line(result.stdout).startswith(
        "next: distrun launch --nproc-per-node 2 build/train_ddp.py")


def test_script_into_an_existing_folder_named_without_a_slash(work: Path) -> None:
    (work / "build").mkdir()
    result = run("convert", "train.py", "-o", "build")
    assert result.exit_code == 0, result.output
    assert snapshot(work / "build").keys() == {"train_ddp.py"}
    assert " build/train_ddp.py " in next_line(result.stdout) + " "


def test_script_to_a_file_in_missing_folders(work: Path) -> None:
    result = run("convert", "train.py", "-o", "out/deeper/x.py")
    assert result.exit_code == 0, result.output
    assert "DistributedSampler" in (work / "out" / "deeper" / "x.py").read_text()
    assert " out/deeper/x.py " in next_line(result.stdout) + " "


def test_a_file_name_without_suffix_is_still_a_file(work: Path) -> None:
    assert run("convert", "train.py", "-o", "plain").exit_code == 0
    assert (work / "plain").is_file()


def test_a_file_named_with_a_slash_is_not_a_folder(work: Path) -> None:
    (work / "build").write_text("a file")
    stderr = assert_error(run("convert", "train.py", "-o", "build/"))
    assert "build/: not a folder" in stderr
    assert (work / "build").read_text() == "a file"


def test_the_folder_rules_keep_force_and_orig(work: Path) -> None:
    assert run("convert", "train.py", "-o", "build/").exit_code == 0
    again = run("convert", "train.py", "-o", "build/")
    assert again.exit_code == 0  # the same content: nothing to replace
    (work / "build" / "train_ddp.py").write_text("# mine\n")
    assert "build/train_ddp.py already exists" in assert_error(
        run("convert", "train.py", "-o", "build"))
    assert run("convert", "train.py", "-o", "build", "--force").exit_code == 0
    assert (work / "build" / "train_ddp.py.orig").read_text() == "# mine\n"


def test_a_script_left_unconverted_makes_no_folder(work: Path) -> None:
    (work / "spawns.py").write_text(SPAWNS)
    result = run("convert", "spawns.py", "-o", "build/")
    assert result.exit_code == 4, result.output
    assert not (work / "build").exists()


def test_python_dash_m_writes_into_the_folder_and_names_it(work: Path) -> None:
    proc = run_distrun("convert", "train.py", "-o", "build/", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / "build" / "train_ddp.py").is_file()
    assert not (work / "build").is_file()
    assert "build/train_ddp.py" in next_line(proc.stdout)


def test_the_json_report_names_the_file_written(work: Path) -> None:
    result = run("convert", "train.py", "-o", "build/", "--report", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["output"] == "build/train_ddp.py"


# --------------------------------------------------------------------------- a project


def test_a_project_refuses_a_py_file_name(proj: Path) -> None:
    before = snapshot(proj.parent)
    stderr = assert_error(run("convert", "proj/train.py", "-o", "x_ddp.py"))
    assert "a project converts to a folder" in stderr
    assert snapshot(proj.parent) == before  # no folder named x_ddp.py


def test_a_project_into_a_folder_ending_in_a_slash(proj: Path) -> None:
    result = run("convert", "proj/train.py", "-o", "build/")
    assert result.exit_code == 0, result.output
    copy = proj.parent / "build" / "proj_ddp"
    assert "DistributedSampler" in (copy / "train.py").read_text()
    assert (copy / "helpers.py").read_text() == (proj / "helpers.py").read_text()
    assert "proj/train.py -> build/proj_ddp:" in result.stdout
    again = run("convert", "proj/train.py", "-o", "build/")
    assert "build/proj_ddp already exists" in assert_error(again)


def test_a_project_copy_in_missing_folders(proj: Path) -> None:
    result = run("convert", "proj/train.py", "-o", "a/b/copy")
    assert result.exit_code == 0, result.output
    assert (proj.parent / "a" / "b" / "copy" / "train.py").is_file()


def test_a_project_copy_into_an_existing_empty_folder(proj: Path) -> None:
    (proj.parent / "build").mkdir()
    result = run("convert", "proj/train.py", "-o", "build/")
    assert result.exit_code == 0, result.output
    assert (proj.parent / "build" / "proj_ddp" / "train.py").is_file()


def test_a_project_given_a_file_with_a_slash_is_refused(proj: Path) -> None:
    (proj.parent / "build").write_text("a file")
    assert "build/: not a folder" in assert_error(run("convert", "proj/train.py", "-o",
                                                      "build/"))

# --------------------------------------------------------------------------- a notebook


def test_a_notebook_into_a_missing_folder(nb: Path) -> None:
    result = run("convert", nb.name, "-o", "build/")
    assert result.exit_code == 0, result.output
    assert "DistributedSampler" in (nb.parent / "build" / "train_ddp.py").read_text()
    assert "train.ipynb -> build/train_ddp.py:" in result.stdout


def test_a_notebook_into_an_existing_folder_and_missing_parents(nb: Path) -> None:
    (nb.parent / "there").mkdir()
    assert run("convert", nb.name, "-o", "there").exit_code == 0
    assert (nb.parent / "there" / "train_ddp.py").is_file()
    assert run("convert", nb.name, "-o", "out/x.py").exit_code == 0
    assert (nb.parent / "out" / "x.py").is_file()


def test_a_notebook_is_never_its_own_output(nb: Path) -> None:
    before = nb.read_bytes()
    assert_error(run("convert", nb.name, "-o", nb.name))
    assert nb.read_bytes() == before


# --------------------------------------------------------------------------- the core


def test_the_core_returns_what_to_write_and_prints_nothing(
        work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = ConvertRequest("train.py", detect_input("train.py"), "file", output="build/")
    outcome = convert_request(request)
    assert [f.path for f in outcome.files] == ["build/train_ddp.py"]
    assert outcome.launch == "build/train_ddp.py" and outcome.exit_code == 0
    assert not (work / "build").exists()  # planned, not written
    assert write_outcome(outcome) == []
    assert (work / "build" / "train_ddp.py").read_text() == outcome.result.output
    assert capsys.readouterr() == ("", "")


def test_the_request_detects_each_kind_once(proj: Path, nb: Path) -> None:
    assert detect_input("proj/train.py") == "project"
    assert detect_input("proj/helpers.py") == "script"
    assert detect_input(nb.name) == "notebook"
    with pytest.raises(ValueError):
        ConvertRequest("proj/train.py", "project", "file", output="x")


def test_a_syntax_error_carries_its_line_as_data(work: Path) -> None:
    (work / "bad.py").write_text("x = 1\ny = (2\n")
    with pytest.raises(ConvertError) as raised:
        convert_request(ConvertRequest("bad.py", "script", "check"))
    err = raised.value
    assert (err.line, err.column) == (2, 5)
    assert err.message == f"bad.py:2:5: {err.detail}"

