"""The shim's DISTRUN_SHIM_MAIN_GLOBALS knob (shim/_distrun_shim/main_globals.py): a
script's top-level constants rebound at run time, the file unchanged. Real processes with
the shared shim first on PYTHONPATH, as the harness runs projects; no torch imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.projects.harness import SHARED_SHIM

SCRIPT = """\
max_iters = 3000
eval_iters = 200
half = max_iters // 2
steps = sum(1 for _ in range(max_iters))
print(steps, eval_iters, half)
"""


def _run(tmp_path: Path, argv: list[str], knob: str | None,
         extra: dict[str, str] | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRUN_SHIM_")}
    env["PYTHONPATH"] = str(SHARED_SHIM)
    env.update(extra or {})
    if knob is not None:
        env["DISTRUN_SHIM_MAIN_GLOBALS"] = knob
    done = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_top_level_constants_are_rebound_after_the_script_binds_them(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    assert _run(tmp_path, ["train.py"], None) == "3000 200 1500"
    # only the first binding is replaced; what is computed from it follows
    assert _run(tmp_path, ["train.py"], "max_iters=40;eval_iters=4") == "40 4 20"
    # a name the script never binds changes nothing
    assert _run(tmp_path, ["train.py"], "other=1") == "3000 200 1500"


def test_a_script_run_as_main_by_another_file_is_rebound(tmp_path: Path) -> None:
    """`distrun launch --check` starts check/boot.py, which runs the script with runpy
    in a fresh `__main__`."""
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "boot.py").write_text(
        "import runpy, sys\nrunpy.run_path(sys.argv[1], run_name='__main__')\n")
    assert _run(tmp_path, ["boot.py", "train.py"], "max_iters=7") == "7 200 3"


def test_processes_not_started_on_a_file_are_left_alone(tmp_path: Path) -> None:
    assert _run(tmp_path, ["-c", "max_iters = 3000\nprint(max_iters)"],
                "max_iters=5") == "3000"


def test_an_expression_is_evaluated_in_the_script_and_range_is_capped(tmp_path: Path) -> None:
    """`NAME:=EXPR` (pytorch_cifar's `net:=LeNet()`) and DISTRUN_SHIM_MAIN_RANGE_CAP
    (its `range(start_epoch, start_epoch+200)`), directly and under boot.py."""
    (tmp_path / "train.py").write_text(
        "def small():\n    return 'small'\n\nnet = 'big'\nstart = 0\n"
        "epochs = [e for e in range(start, start + 200)]\n"
        "def steps():\n    return len(range(50))\n\nprint(net, len(epochs), steps())\n")
    (tmp_path / "boot.py").write_text(
        "import runpy, sys\nrunpy.run_path(sys.argv[1], run_name='__main__')\n")
    assert _run(tmp_path, ["train.py"], None) == "big 200 50"
    cap = {"DISTRUN_SHIM_MAIN_RANGE_CAP": "2"}
    assert _run(tmp_path, ["train.py"], "net:=small()", cap) == "small 2 2"
    assert _run(tmp_path, ["boot.py", "train.py"], "net:=small()", cap) == "small 2 2"
    assert _run(tmp_path, ["train.py"], None, cap) == "big 2 2"


def test_a_package_module_run_as_a_file_gets_its_package(tmp_path: Path) -> None:
    """DISTRUN_SHIM_MAIN_PACKAGE (asr_voice100: `python -m voice100_tts.train_ctc`
    upstream): the script's relative imports resolve, run directly or by a boot file."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("VALUE = 42\n")
    (package / "train.py").write_text("from .helper import VALUE\nprint(VALUE)\n")
    (tmp_path / "boot.py").write_text(
        "import runpy, sys\nrunpy.run_path(sys.argv[1], run_name='__main__')\n")
    extra = {"PYTHONPATH": os.pathsep.join([str(SHARED_SHIM), str(tmp_path)]),
             "DISTRUN_SHIM_MAIN_PACKAGE": "pkg"}
    assert _run(tmp_path, ["pkg/train.py"], None, extra) == "42"
    assert _run(tmp_path, ["boot.py", "pkg/train.py"], "VALUE=42", extra) == "42"
