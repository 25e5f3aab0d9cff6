"""`distrun convert` through the real CLI entry point (`distrun.cli.main`): the default
mode, the other output modes, an existing output file, and the JSON report.

Most cases run in-process with click's CliRunner (see tests/cli/convert_helpers.py).
Idempotence and source fidelity are in test_convert_cli_fidelity.py; bad input and
errors in real processes are in test_convert_cli_errors.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.convert_helpers import (
    TRAIN,
    assert_error,
    assert_no_distrun_imports_and_compiles,
    run,
    snapshot,
)

# Same script plus a BatchNorm layer, which should give at least one finding.
TRAIN_WITH_FINDING = TRAIN.replace(
    "model = nn.Linear(4, 1)", "model = nn.Sequential(nn.Linear(4, 1), nn.BatchNorm1d(1))"
)


# --------------------------------------------------------------------------- default mode


def test_default_writes_stem_ddp_beside_the_script(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)  # not the script's folder

    result = run("convert", "project/train.py")

    assert result.exit_code == 0, result.output
    out = sub / "train_ddp.py"
    assert out.is_file()
    assert sorted(os.listdir(tmp_path)) == ["project"]  # nothing written in the cwd
    assert (sub / "train.py").read_text() == TRAIN  # original untouched
    converted = out.read_text()
    assert converted != TRAIN
    assert "DistributedDataParallel" in converted or "DDP" in converted
    assert_no_distrun_imports_and_compiles(out.read_bytes(), str(out))


def test_text_report_has_a_located_line_per_entry_then_a_summary(work: Path) -> None:
    (work / "train.py").write_text(TRAIN_WITH_FINDING)
    data = json.loads(run("convert", "train.py", "-o", "-", "--report", "json").stderr)
    n_entries = len(data["changes"]) + len(data["findings"])
    assert data["changes"] and data["findings"], data

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.rstrip("\n").splitlines()
             if not line.startswith(("next: ", "batch: "))]  # the next steps follow
    located = [line for line in lines if re.match(r"train\.py:\d+: \S", line)]
    assert len(located) == n_entries, result.stdout
    for entry in data["changes"] + data["findings"]:
        assert any(line.startswith(f"train.py:{entry['line']}: ") for line in located), entry
    summary = lines[-1]
    assert not re.match(r"train\.py:\d+:", summary), f"last line is not a summary: {summary}"
    assert "train.py" in summary


def test_output_to_stdout_sends_report_to_stderr_and_writes_nothing(work: Path) -> None:
    before = snapshot(work)

    result = run("convert", "train.py", "-o", "-")

    assert result.exit_code == 0, result.output
    assert snapshot(work) == before
    # stdout is exactly the converted script: same as what the default mode writes
    run("convert", "train.py")
    assert result.stdout == (work / "train_ddp.py").read_text()
    assert "train.py:" in result.stderr  # the report
    assert "train.py:" not in result.stdout


def test_output_option_writes_only_the_named_file(work: Path) -> None:
    result = run("convert", "train.py", "-o", "dist_train.py")

    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(work)) == ["dist_train.py", "train.py"]
    assert_no_distrun_imports_and_compiles((work / "dist_train.py").read_bytes(), "dist_train.py")


# --------------------------------------------------------------------------- next steps

BATCH_NOTE = ("batch: each process reads batch_size samples per step, so a step sees "
              "batch_size x processes in all: scale the learning rate with it, or "
              "divide batch_size by the number of processes to train as before")


@pytest.mark.parametrize("target", ["ddp", "accelerate"])
def test_next_steps_end_with_what_sharding_does_to_the_batch(work: Path, target: str) -> None:
    result = run("convert", "train.py", "--to", target)

    assert result.exit_code == 0, result.output
    *_, launch, batch = result.stdout.splitlines()
    assert launch.startswith("next: distrun launch "), result.stdout
    assert batch == BATCH_NOTE


def test_no_batch_note_when_no_loader_is_sharded(work: Path) -> None:
    # Batches built by hand: no DataLoader to shard (a warning says so), nothing to add.
    (work / "train.py").write_text(
        TRAIN.replace("loader = DataLoader(data, batch_size=16, shuffle=True)\n", "")
        .replace("for x, y in loader:", "for x, y in zip(data.tensors[0].split(16), "
                 "data.tensors[1].split(16)):"))

    result = run("convert", "train.py", "--partial")  # unsharded data blocks otherwise

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith("next: distrun launch --check "), \
        result.stdout
    assert "batch: " not in result.stdout


# --------------------------------------------------------------------------- modes


def test_in_place_rewrites_and_keeps_orig(work: Path) -> None:
    run("convert", "train.py", "-o", "expected.py")
    expected = (work / "expected.py").read_bytes()
    (work / "expected.py").unlink()

    result = run("convert", "train.py", "--in-place")

    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(work)) == ["train.py", "train.py.orig"]  # no temp files left
    assert (work / "train.py").read_bytes() == expected
    assert (work / "train.py.orig").read_text() == TRAIN


def test_in_place_never_replaces_an_earlier_backup(work: Path) -> None:
    (work / "train.py.orig").write_text("# an earlier backup the user cares about\n")
    before = snapshot(work)

    result = run("convert", "train.py", "--in-place")

    assert_error(result)
    assert "train.py.orig already exists" in result.output
    assert snapshot(work) == before


def test_in_place_no_backup_keeps_no_orig(work: Path) -> None:
    result = run("convert", "train.py", "--in-place", "--no-backup")

    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(work)) == ["train.py"]
    assert (work / "train.py").read_text() != TRAIN


def test_diff_prints_an_applicable_unified_diff_and_writes_nothing(work: Path) -> None:
    before = snapshot(work)

    result = run("convert", "train.py", "--diff")

    assert result.exit_code == 0, result.output
    assert snapshot(work) == before
    diff = result.stdout
    assert re.search(r"^--- .*train\.py", diff, re.M), diff
    assert re.search(r"^\+\+\+ .*train\.py", diff, re.M), diff
    assert re.search(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", diff, re.M), diff

    # Applying the diff gives exactly what the default mode writes.
    run("convert", "train.py", "-o", "expected.py")
    if shutil.which("patch") is None:
        pytest.skip("`patch` not installed: cannot apply the diff")
    proc = subprocess.run(["patch", "--quiet", "-o", "patched.py", "train.py"], input=diff,
                          text=True, capture_output=True, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (work / "patched.py").read_bytes() == (work / "expected.py").read_bytes()


def test_check_exits_1_when_work_is_needed_and_writes_nothing(work: Path) -> None:
    before = snapshot(work)

    result = run("convert", "train.py", "--check")

    assert result.exit_code == 1, result.output
    assert snapshot(work) == before


# --------------------------------------------------------------------------- existing OUT


def test_existing_different_output_is_refused(work: Path) -> None:
    (work / "train_ddp.py").write_text("# someone else's file\n")
    before = snapshot(work)

    result = run("convert", "train.py")

    stderr = assert_error(result)
    assert "train_ddp.py" in stderr
    assert snapshot(work) == before


def test_force_replaces_existing_output_and_keeps_orig(work: Path) -> None:
    expected = run("convert", "train.py", "-o", "-").stdout
    (work / "train_ddp.py").write_text("# someone else's file\n")

    result = run("convert", "train.py", "--force")

    assert result.exit_code == 0, result.output
    assert (work / "train_ddp.py").read_text() == expected
    assert (work / "train_ddp.py.orig").read_text() == "# someone else's file\n"


def test_existing_identical_output_is_fine(work: Path) -> None:
    assert run("convert", "train.py").exit_code == 0
    before = snapshot(work)

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    assert snapshot(work) == before




# --------------------------------------------------------------------------- JSON report


def test_json_report_shape(work: Path) -> None:
    (work / "train.py").write_text(TRAIN_WITH_FINDING)

    result = run("convert", "train.py", "--report", "json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"file", "status", "changed", "changes", "findings", "output"}
    assert data["file"] == "train.py"
    assert data["changed"] is True
    assert isinstance(data["status"], str)
    assert data["output"] is not None and Path(data["output"]).name == "train_ddp.py"
    assert (work / "train_ddp.py").is_file()
    assert data["changes"]
    for change in data["changes"]:
        assert set(change) == {"line", "rule", "message"}
        assert isinstance(change["line"], int) and change["line"] >= 1
    assert data["findings"]
    for finding in data["findings"]:
        assert set(finding) == {"line", "rule", "severity", "message", "fix"}
        assert isinstance(finding["line"], int) and finding["line"] >= 1


def test_json_report_with_stdout_output_goes_to_stderr(work: Path) -> None:
    result = run("convert", "train.py", "-o", "-", "--report", "json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stderr)
    assert data["changed"] is True
    compile(result.stdout, "<stdout>", "exec")
    assert not result.stdout.lstrip().startswith("{")


def test_check_json_reports_changed_and_writes_nothing(work: Path) -> None:
    before = snapshot(work)

    result = run("convert", "train.py", "--check", "--report", "json")

    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["changed"] is True
    assert data["output"] is None
    assert snapshot(work) == before
