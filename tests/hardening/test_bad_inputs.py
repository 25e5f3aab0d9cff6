"""`distrun convert` on inputs that must be refused cleanly, or converted faithfully.

Refused (exit 2, a `distrun: error:` message naming the file and, for code, the line;
no traceback; nothing written, not even a temporary file): an empty file, a file whose
tabs and spaces Python cannot reconcile, Python 2 code, an output in a folder that
cannot be written. Converted: a file indented with tabs (tabs kept), a file with a BOM,
CRLF line endings and tabs at once, a 50,000-line script.

The missing-file, directory, binary, non-UTF-8, BOM, CRLF and syntax-error cases are in
tests/cli/test_convert_cli_errors.py and tests/cli/test_convert_cli_fidelity.py.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tokenize
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.bench_convert import make_script
from tests.cli.convert_helpers import TRAIN, assert_error, run, snapshot
from tests.conftest import distrun as run_distrun

MODES = pytest.mark.parametrize("mode", [[], ["--in-place"], ["--check"], ["-o", "-"],
                                         ["--diff"]],
                                ids=["default", "in-place", "check", "stdout", "diff"])


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def with_tabs(source: str) -> str:
    """Every leading group of four spaces as a tab."""
    return "".join(re.sub(r"^(?:    )+", lambda m: "\t" * (len(m.group()) // 4), line)
                   for line in source.splitlines(keepends=True))


# --------------------------------------------------------------------------- empty


@MODES
@pytest.mark.parametrize("content", [b"", b"\n\n   \n", b"# only a comment\n\n# another\n",
                                     b"\xef\xbb\xbf"], ids=["zero-bytes", "blank-lines",
                                                           "comments-only", "bom-only"])
def test_empty_file_is_refused(work: Path, content: bytes, mode: list[str]) -> None:
    (work / "train.py").write_bytes(content)
    before = snapshot(work)

    stderr = assert_error(run("convert", "train.py", *mode))

    assert "train.py: empty file" in stderr and "nothing to convert" in stderr
    assert snapshot(work) == before


# --------------------------------------------------------------------------- tabs


def test_tab_indented_script_converts_and_keeps_its_tabs(work: Path) -> None:
    source = with_tabs(TRAIN)
    assert "\t" in source
    (work / "train.py").write_text(source)

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    converted = (work / "train_ddp.py").read_text()
    assert converted != source
    compile(converted, "train_ddp.py", "exec")
    indents = [tok.string for tok in tokenize.generate_tokens(io.StringIO(converted).readline)
               if tok.type == tokenize.INDENT]
    assert len(indents) >= 4  # the loops, and the blocks the converter added
    assert all(set(indent) == {"\t"} for indent in indents), indents


def test_mixed_tabs_and_spaces_python_rejects_is_refused_with_its_line(work: Path) -> None:
    lines = TRAIN.splitlines()
    assert lines[12].startswith("        loss = ")  # line 13, inside the inner loop
    lines[12] = "\t" + lines[12].lstrip()  # Python 3 cannot tell a tab's width here
    source = "\n".join(lines) + "\n"
    with pytest.raises(TabError) as python_says:
        compile(source, "train.py", "exec")
    (work / "train.py").write_text(source)
    before = snapshot(work)

    stderr = assert_error(run("convert", "train.py"))

    assert f"train.py:{python_says.value.lineno}:" in stderr, stderr
    assert "tabs and spaces" in stderr
    assert snapshot(work) == before


def test_bom_crlf_and_tabs_together_are_all_kept(work: Path) -> None:
    bom = b"\xef\xbb\xbf"
    (work / "train.py").write_bytes(bom + with_tabs(TRAIN).replace("\n", "\r\n").encode())

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert data.startswith(bom) and not data[3:].startswith(bom)
    assert data.count(b"\n") == data.count(b"\r\n") > TRAIN.count("\n")
    assert b"\n    " not in data  # blocks indented with tabs, not spaces
    compile(data, "train_ddp.py", "exec")


# --------------------------------------------------------------------------- Python 2

PYTHON2 = {
    "print-statement": ('print "epoch", epoch', "print statement"),
    "except-comma": ("try:\n    pass\nexcept ValueError, err:\n    pass", "except E, e:"),
    "exec-statement": ('exec "x = 1"', "exec statement"),
    "octal-literal": ("mode = 0777", "octal literal"),
    "long-literal": ("steps = 10L", "long literal"),
    "backticks": ("name = `epoch`", "backticks"),
    "not-equal": ("same = epoch <> 1", "<>"),
    "raise-comma": ('raise ValueError, "bad"', 'raise E, "message"'),
    "ur-string": ('name = ur"epoch"', "ur'' string"),
    "tuple-parameter": ("def scale((a, b)):\n    return a * b", "tuple parameter"),
}


@pytest.mark.parametrize("case", sorted(PYTHON2))
def test_python2_is_named_with_its_line(work: Path, case: str) -> None:
    code, what = PYTHON2[case]
    lines = TRAIN.splitlines()
    at = 5  # after the imports and torch.manual_seed
    source = "\n".join([*lines[:at], *code.splitlines(), *lines[at:]]) + "\n"
    with pytest.raises(SyntaxError) as python_says:
        compile(source, "train.py", "exec")
    (work / "train.py").write_text(source)
    before = snapshot(work)

    stderr = assert_error(run("convert", "train.py"))

    assert "looks like Python 2" in stderr and what in stderr, stderr
    match = re.search(r"train\.py:(\d+):\d+:", stderr)
    assert match and int(match.group(1)) == python_says.value.lineno, stderr
    assert at < python_says.value.lineno <= at + len(code.splitlines())
    assert snapshot(work) == before


def test_python3_syntax_errors_are_not_called_python2(work: Path) -> None:
    (work / "train.py").write_text(TRAIN + "for x in range(3)\n    pass\n")

    stderr = assert_error(run("convert", "train.py"))

    assert "Python 2" not in stderr
    assert re.search(r"train\.py:\d+:\d+: not valid Python", stderr), stderr


# --------------------------------------------------------------------------- no permission


def _chattr_works(folder: Path) -> bool:
    probe = folder / "probe"
    probe.mkdir()
    try:
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
            return False
        try:
            (probe / "x").touch()
        except OSError:
            return True
        return False
    finally:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
        shutil.rmtree(probe, ignore_errors=True)


@contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """`chattr +i`: not even root may create, replace or remove anything there."""
    for path in paths:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        for path in paths:
            subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("case", ["default-output", "output-into-folder", "in-place",
                                  "in-place-locked-script", "force-over-locked-output"])
def test_output_that_cannot_be_written(work: Path, case: str) -> None:
    if not _chattr_works(work):
        pytest.skip("chattr +i is not available on this file system (or not permitted)")
    (work / "train.py").write_text(TRAIN)
    (work / "locked").mkdir()
    (work / "old_ddp.py").write_text("# an older output\n")
    args, locked = {
        "default-output": (["train.py"], [work]),
        "output-into-folder": (["train.py", "-o", "locked/train_ddp.py"], [work / "locked"]),
        "in-place": (["train.py", "--in-place"], [work]),
        # the folder may be written, the script may not: the backup must not stay behind
        "in-place-locked-script": (["train.py", "--in-place"], [work / "train.py"]),
        "force-over-locked-output": (["train.py", "-o", "old_ddp.py", "--force"],
                                     [work / "old_ddp.py"]),
    }[case]
    before = snapshot(work)

    with immutable(*locked):
        stderr = assert_error(run("convert", *args))

    assert "cannot write" in stderr and "Operation not permitted" in stderr, stderr
    assert snapshot(work) == before  # nothing written: no output, no .orig, no temp file


def test_output_on_a_read_only_file_system(work: Path) -> None:
    """A read-only bind mount (a private mount namespace), in a real process."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "--propagation", "private", "true"],
            capture_output=True).returncode != 0:
        pytest.skip("cannot make a mount namespace here (unshare -m)")
    (work / "train.py").write_text(TRAIN)
    before = snapshot(work)
    folder = shlex.quote(str(work))
    script = (f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} && "
              f"cd {folder} && exec {shlex.quote(sys.executable)} -m distrun convert "
              "train.py --in-place")

    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])

    if "mount:" in proc.stderr:
        pytest.skip(f"cannot bind-mount read-only here: {proc.stderr.strip()}")
    assert_error(proc)
    assert "train.py: cannot write: Read-only file system" in proc.stderr, proc.stderr
    assert snapshot(work) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores folder modes (the chattr and read-only mount cases "
                    "cover it)")
def test_output_folder_without_write_permission(work: Path) -> None:
    (work / "train.py").write_text(TRAIN)
    work.chmod(0o555)
    try:
        before = snapshot(work)
        stderr = assert_error(run("convert", "train.py"))
        assert "cannot write: Permission denied" in stderr
        assert snapshot(work) == before
    finally:
        work.chmod(0o755)


# --------------------------------------------------------------------------- in real processes


@pytest.mark.parametrize("case", ["empty", "python2", "tabs-and-spaces"])
def test_refusals_in_a_real_process_have_no_traceback(tmp_path: Path, case: str) -> None:
    source = {"empty": "", "python2": TRAIN + 'print "done"\n',
              "tabs-and-spaces": TRAIN.replace("        loss = ", "\tloss = ")}[case]
    (tmp_path / "train.py").write_text(source)
    before = snapshot(tmp_path)

    proc = run_distrun("convert", "train.py", cwd=tmp_path)

    assert_error(proc)
    assert snapshot(tmp_path) == before


def test_the_scripts_own_syntax_warnings_are_not_printed(tmp_path: Path) -> None:
    """Python warns about `x is "a"` while compiling; converting is not running."""
    (tmp_path / "train.py").write_text(TRAIN + 'if epoch is "last":\n    pass\n')

    proc = run_distrun("convert", "train.py", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "SyntaxWarning" not in proc.stdout + proc.stderr
    assert (tmp_path / "train_ddp.py").is_file()


# --------------------------------------------------------------------------- size


def test_a_10000_line_script_converts(tmp_path: Path) -> None:
    """Through the real command; the time is printed (timing goals, and a script of
    50,000 lines: benchmarks/bench_convert.py --large)."""
    text = make_script(10_000)
    assert text.count("\n") >= 10_000
    (tmp_path / "big.py").write_text(text)

    start = time.perf_counter()
    proc = run_distrun("convert", "big.py", cwd=tmp_path, timeout=600)
    seconds = time.perf_counter() - start

    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    converted = (tmp_path / "big_ddp.py").read_bytes()
    compile(converted, "big_ddp.py", "exec")
    assert b"init_process_group" in converted and b"DistributedSampler(" in converted
    print(f"\n10,000-line script: `distrun convert` took {seconds:.1f} s "
          f"({text.count(chr(10)) / seconds:,.0f} lines/s)")
