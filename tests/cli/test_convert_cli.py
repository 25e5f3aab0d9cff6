"""`distrun convert` through the real CLI entry point (`distrun.cli.main`).

Most cases run in-process with click's CliRunner on a thin wrapper around `main`
(so `DistrunError` -> exit code handling is exercised); a few error paths also run as
real subprocesses to prove no traceback escapes.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from distrun.cli import main
from tests.conftest import CORPUS
from tests.conftest import distrun as run_distrun

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
"""

# Same script plus a BatchNorm layer, which should give at least one finding.
TRAIN_WITH_FINDING = TRAIN.replace(
    "model = nn.Linear(4, 1)", "model = nn.Sequential(nn.Linear(4, 1), nn.BatchNorm1d(1))"
)

ALREADY_DISTRIBUTED = """\
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=True))
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
dist.destroy_process_group()
"""

CORPUS_SCRIPTS = sorted(p.name for p in CORPUS.glob("*.py"))


# --------------------------------------------------------------------------- helpers


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def _entry(argv: tuple[str, ...]) -> None:
    main(list(argv))


def run(*args: str) -> Result:
    """Invoke `distrun ARGS...` in-process; stdout and stderr are kept apart."""
    result = CliRunner().invoke(_entry, list(args))
    # Only a SystemExit (from main) may end the command: any other exception is a crash.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"distrun {' '.join(args)} crashed: {result.exception!r}\n{result.output}"
        ) from result.exception
    return result


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                     else b"<not a regular file>")
        for p in sorted(folder.rglob("*"))
    }


def snapshot_names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def assert_error(result: Result | subprocess.CompletedProcess[str], code: int = 2) -> str:
    """An error exit: the expected code, a `distrun: error:` message, no traceback."""
    rc = result.exit_code if isinstance(result, Result) else result.returncode
    stderr = result.stderr
    stdout = result.stdout
    assert rc == code, f"exit {rc}, expected {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert "Traceback" not in stderr + stdout
    assert stderr.startswith("distrun: error:"), f"stderr:\n{stderr}"
    return stderr


def assert_no_distrun_imports_and_compiles(data: bytes, name: str) -> None:
    compile(data, name, "exec")  # bytes: honours a BOM or a coding line
    tree = ast.parse(data)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            continue
        for mod in mods:
            assert mod.split(".")[0] != "distrun", f"{name} imports {mod}"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch folder, made the current directory, holding train.py."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


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


# --------------------------------------------------------------------------- idempotence


@pytest.mark.parametrize("name", CORPUS_SCRIPTS)
def test_corpus_output_compiles_and_is_a_fixed_point(name: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(CORPUS / name, tmp_path / name)
    stem = name.removesuffix(".py")

    first = run("convert", name)
    assert first.exit_code == 0, first.output
    out = tmp_path / f"{stem}_ddp.py"
    converted = out.read_bytes()
    assert_no_distrun_imports_and_compiles(converted, out.name)

    check = run("convert", out.name, "--check")
    assert check.exit_code == 0, f"--check on the converted output:\n{check.output}"

    again = run("convert", out.name, "-o", "again.py")
    assert again.exit_code == 0, again.output
    assert out.read_bytes() == converted
    if (tmp_path / "again.py").exists():
        assert (tmp_path / "again.py").read_bytes() == converted


def test_already_distributed_script_is_left_alone(work: Path) -> None:
    (work / "train.py").write_text(ALREADY_DISTRIBUTED)

    check = run("convert", "train.py", "--check")
    assert check.exit_code == 0, check.output

    result = run("convert", "train.py", "--in-place")
    assert result.exit_code == 0, result.output
    assert (work / "train.py").read_text() == ALREADY_DISTRIBUTED

    result = run("convert", "train.py")
    assert result.exit_code == 0, result.output
    ddp = work / "train_ddp.py"
    assert not ddp.exists() or ddp.read_text() == ALREADY_DISTRIBUTED


def test_already_distributed_to_stdout_prints_it_unchanged(work: Path) -> None:
    (work / "train.py").write_text(ALREADY_DISTRIBUTED)

    result = run("convert", "train.py", "-o", "-")

    assert result.exit_code == 0, result.output
    assert result.stdout == ALREADY_DISTRIBUTED


# --------------------------------------------------------------------------- source fidelity


def test_comment_lines_survive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(CORPUS / "comments_everywhere.py", tmp_path)

    result = run("convert", "comments_everywhere.py")

    assert result.exit_code == 0, result.output
    converted = (tmp_path / "comments_everywhere_ddp.py").read_text().splitlines()
    converted_stripped = {line.strip() for line in converted}
    comment_lines = [line.strip() for line in (CORPUS / "comments_everywhere.py").read_text()
                     .splitlines() if line.strip().startswith("#")]
    assert len(comment_lines) >= 5
    missing = [c for c in comment_lines if c not in converted_stripped]
    assert missing == [], f"comment lines lost: {missing}"


def test_crlf_line_endings_are_preserved(work: Path) -> None:
    (work / "train.py").write_bytes(TRAIN.replace("\n", "\r\n").encode())

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert data.count(b"\n") > TRAIN.count("\n")  # it was converted
    bare_lf = data.count(b"\n") - data.count(b"\r\n")
    assert bare_lf == 0, f"{bare_lf} lines end in a bare LF"
    compile(data, "train_ddp.py", "exec")


def test_utf8_bom_is_preserved(work: Path) -> None:
    bom = b"\xef\xbb\xbf"
    (work / "train.py").write_bytes(bom + ("# überall\n" + TRAIN).encode())

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert data.startswith(bom)
    assert not data[3:].startswith(bom)  # exactly one
    assert "# überall" in data[3:].decode("utf-8")
    compile(data, "train_ddp.py", "exec")


def test_latin1_file_with_coding_line_stays_latin1(work: Path) -> None:
    text = "# -*- coding: latin-1 -*-\n# café crème\n" + TRAIN + 'print("température")\n'
    (work / "train.py").write_bytes(text.encode("latin-1"))

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert b"# caf\xe9 cr\xe8me" in data  # single latin-1 bytes, not UTF-8 pairs
    assert b"temp\xe9rature" in data
    assert "coding: latin-1" in data.decode("latin-1").splitlines()[0]
    compile(data, "train_ddp.py", "exec")


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
