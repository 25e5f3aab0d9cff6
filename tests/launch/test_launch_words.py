"""launch's words where users type torchrun's (issue 26): torchrun's underscore spellings
accepted, --check and --no-check, the fix of a misplaced option quoting the user's own
command, and the failure quote keeping the user's innermost frame and naming the log."""

from __future__ import annotations

from pathlib import Path

from distrun.launch.failures import MAX_ERROR_LINES, error_log, read_error
from tests.conftest import distrun

SCRIPT = "import torch\nprint('hello')\n"


def test_torchrun_spellings_are_distrun_s_options_and_leave_the_script_s_alone(
        tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    result = distrun("launch", "--dry-run", "--nproc_per_node=2", "--master_port", "29612",
                     "--max_restarts", "1", "train.py", "--node_rank", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--nproc-per-node=2" in result.stdout
    # restarts: the static rendezvous is made c10d at the master port (test_restarts.py)
    assert "--rdzv-endpoint=127.0.0.1:29612" in result.stdout
    assert "--max-restarts=1" in result.stdout
    assert result.stdout.rstrip().endswith("train.py --node_rank 1")  # the script's own
    helped = distrun("launch", "--help").stdout
    assert "--nproc-per-node" in helped and "nproc_per_node" not in helped


def test_check_and_no_check_together_are_refused(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    result = distrun("launch", "--dry-run", "--check", "--no-check", "--nproc-per-node", "2",
                     "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "--no-check and --check/--check-steps contradict each other" in result.stderr


def test_the_default_check_is_in_the_command_and_no_check_takes_it_out(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    default = distrun("launch", "--dry-run", "--nproc-per-node", "2", "train.py", cwd=tmp_path)
    assert "DISTRUN_CHECK_WINDOW=8" in default.stdout and "boot.py" in default.stdout
    off = distrun("launch", "--dry-run", "--no-check", "--nproc-per-node", "2", "train.py",
                  cwd=tmp_path)
    assert "DISTRUN_CHECK" not in off.stdout and "boot.py" not in off.stdout
    one = distrun("launch", "--dry-run", "--nproc-per-node", "1", "train.py", cwd=tmp_path)
    assert "boot.py" not in one.stdout  # one process: nothing to compare, nothing added


def test_a_module_this_python_cannot_find_runs_unchecked_with_one_line(tmp_path: Path) -> None:
    result = distrun("launch", "--dry-run", "--nproc-per-node", "2", "-m", "no_such_module_x",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ("distrun: check: not run (-m no_such_module_x: not a module this Python finds); "
            "the job runs unchecked") in result.stderr
    assert "boot.py" not in result.stdout


def test_the_fix_of_a_misplaced_option_is_the_user_s_command_reordered(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(SCRIPT)
    result = distrun("launch", "--dry-run", "mine.py", "--nproc-per-node", "2", "--epochs",
                     "3", cwd=tmp_path)
    assert ("  fix: put distrun's options before SCRIPT: `distrun launch --dry-run "
            "--nproc-per-node 2 mine.py --epochs 3`") in result.stderr


def _log(tmp_path: Path, text: str) -> str:
    folder = tmp_path / "logs" / "none_x" / "attempt_0" / "1"
    folder.mkdir(parents=True)
    (folder / "stderr.log").write_text(text)
    return str(tmp_path / "logs")


def test_a_long_traceback_keeps_the_user_s_innermost_frame(tmp_path: Path) -> None:
    """An error raised inside torch: the quote keeps train.py's frame (the line of the
    user's code that called into torch), not only torch's frames."""
    lib = "/usr/lib/python3/site-packages/torch/nn/modules"
    frames = [f'  File "{lib}/module.py", line {n}, in _call_impl\n    return forward(x)'
              for n in range(1, 8)]
    text = "\n".join([
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/home/me/train.py", line 40, in <module>',
        "[rank1]:     main()",
        '[rank1]:   File "/home/me/train.py", line 31, in main',
        "[rank1]:     out = model(batch)",
        *(f"[rank1]: {line}" for frame in frames for line in frame.splitlines()),
        f'[rank1]:   File "{lib}/linear.py", line 125, in forward',
        "[rank1]:     return F.linear(input, self.weight, self.bias)",
        "[rank1]: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 8x3)"])
    logs = _log(tmp_path, text + "\n")
    quote = read_error(logs, 1).splitlines()
    assert len(quote) <= MAX_ERROR_LINES, quote
    assert quote[0] == "Traceback (most recent call last):"
    assert '  File "/home/me/train.py", line 31, in main' in quote
    assert "    out = model(batch)" in quote
    assert quote[-1].startswith("RuntimeError: mat1 and mat2 shapes")
    assert error_log(logs, 1) == tmp_path / "logs" / "none_x" / "attempt_0" / "1" / "stderr.log"


def test_a_failed_rank_s_log_file_is_named_in_the_report(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(
        "import os\nif os.environ['RANK'] == '1':\n    raise KeyError('label')\n")
    result = distrun("launch", "--no-check", "--nproc-per-node", "2", "--log-dir", "logs",
                     "broken.py", cwd=tmp_path)
    assert result.returncode == 1
    logs = list((tmp_path / "logs").glob("*/attempt_0/1/stderr.log"))
    assert len(logs) == 1, result.stderr[-2000:]
    assert f"    log: {logs[0].relative_to(tmp_path)}" in result.stderr, result.stderr[-2000:]
