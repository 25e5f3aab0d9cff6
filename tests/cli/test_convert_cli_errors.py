"""`distrun convert` through the real CLI entry point: bad input and bad options are
refused with exit 2 and a `distrun: error:` message, no traceback, nothing written; a few
cases also run as real subprocesses to prove no traceback escapes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.cli.convert_helpers import TRAIN, assert_error, run, snapshot, snapshot_names
from tests.conftest import distrun as run_distrun

# --------------------------------------------------------------------------- bad input


def test_missing_file(work: Path) -> None:
    before = snapshot(work)
    stderr = assert_error(run("convert", "nope.py"))
    assert "nope.py" in stderr
    assert snapshot(work) == before


def test_directory(work: Path) -> None:
    (work / "pkg").mkdir()
    before = snapshot(work)
    assert_error(run("convert", "pkg"))
    assert snapshot(work) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root can read a mode-000 file")
def test_unreadable_file(work: Path) -> None:
    (work / "train.py").chmod(0)
    try:
        before = snapshot_names(work)
        assert_error(run("convert", "train.py"))
        assert snapshot_names(work) == before
    finally:
        (work / "train.py").chmod(0o644)


def test_binary_file(work: Path) -> None:
    (work / "model.py").write_bytes(b"\x80\x02ctorch\x00\x00\x01\xff\xfe" * 20)
    before = snapshot(work)
    assert_error(run("convert", "model.py"))
    assert snapshot(work) == before


def test_non_utf8_without_coding_line(work: Path) -> None:
    (work / "train.py").write_bytes(("# café\n" + TRAIN).encode("latin-1"))
    before = snapshot(work)
    assert_error(run("convert", "train.py"))
    assert snapshot(work) == before


@pytest.mark.parametrize("mode", [[], ["--in-place"], ["--check"], ["--diff"]],
                         ids=["default", "in-place", "check", "diff"])
def test_syntax_error_names_file_line_col(work: Path, mode: list[str]) -> None:
    lines = TRAIN.splitlines()
    lines[8] = "optimizer = = torch.optim.SGD(model.parameters(), lr=0.1)"  # line 9
    source = "\n".join(lines) + "\n"
    (work / "train.py").write_text(source)
    with pytest.raises(SyntaxError) as python_says:
        compile(source, "train.py", "exec")
    assert python_says.value.lineno == 9
    before = snapshot(work)

    stderr = assert_error(run("convert", "train.py", *mode))

    match = re.search(r"train\.py:(\d+):(\d+)", stderr)
    assert match, stderr
    assert int(match.group(1)) == 9, stderr
    assert int(match.group(2)) >= 1
    assert snapshot(work) == before


@pytest.mark.parametrize("spelling", ["train.py", "./train.py", "sub/../train.py", "link.py"])
def test_output_that_would_overwrite_the_script_is_refused(work: Path, spelling: str) -> None:
    (work / "sub").mkdir()
    (work / "link.py").symlink_to("train.py")
    before = snapshot(work)

    assert_error(run("convert", "train.py", "-o", spelling))

    assert snapshot(work) == before
    assert (work / "train.py").read_text() == TRAIN


@pytest.mark.parametrize("options", [
    ["--diff", "--check"],
    ["--in-place", "--diff"],
    ["--in-place", "--check"],
    ["-o", "x.py", "--in-place"],
    ["-o", "x.py", "--check"],
    ["--no-backup"],
    ["--no-backup", "-o", "x.py"],
])
def test_incompatible_options(work: Path, options: list[str]) -> None:
    before = snapshot(work)
    assert_error(run("convert", "train.py", *options))
    assert snapshot(work) == before


USAGE_ERRORS = pytest.mark.parametrize("argv", [
    ["convert"],
    ["convert", "train.py", "--report", "xml"],
    ["convert", "train.py", "--bogus"],
], ids=["no-script", "bad-report", "unknown-option"])


@USAGE_ERRORS
def test_usage_errors_exit_2_without_traceback(work: Path, argv: list[str]) -> None:
    before = snapshot(work)
    result = run(*argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.strip()
    assert snapshot(work) == before


@USAGE_ERRORS
def test_usage_errors_use_the_distrun_error_prefix(work: Path, argv: list[str]) -> None:
    # Spec: "Errors are a message on stderr starting with `distrun: error:`".
    assert_error(run(*argv))


# --------------------------------------------------------------------------- real processes


@pytest.mark.parametrize("case", ["missing", "syntax", "binary", "diff-and-check"])
def test_errors_in_a_real_process_have_no_traceback(tmp_path: Path, case: str) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    args = {
        "missing": ["nope.py"],
        "syntax": ["bad.py"],
        "binary": ["blob.py"],
        "diff-and-check": ["train.py", "--diff", "--check"],
    }[case]
    (tmp_path / "bad.py").write_text("import torch\ndef f(:\n    pass\n")
    (tmp_path / "blob.py").write_bytes(bytes(range(256)))
    before = snapshot(tmp_path)

    proc = run_distrun("convert", *args, cwd=tmp_path)

    assert_error(proc)
    if case == "syntax":
        assert re.search(r"bad\.py:2:\d+", proc.stderr), proc.stderr
    assert snapshot(tmp_path) == before


def test_real_process_convert_succeeds(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)

    proc = run_distrun("convert", "train.py", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "train_ddp.py").is_file()
    summary = [line for line in proc.stdout.strip().splitlines()
               if not line.startswith(("next: ", "batch: "))][-1]
    assert summary.startswith("train.py")
