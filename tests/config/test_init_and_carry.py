"""`config init` where it used to go wrong quietly (a multi-node file without node 0's
address, no terminal to ask on), what it says next, and exports that say what they
cannot carry instead of dropping it."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import distrun

MULTI = Path(__file__).parent / "golden" / "multi.yaml"


def test_init_of_a_multi_node_job_without_its_address_is_refused(tmp_path: Path) -> None:
    result = distrun("config", "init", "--non-interactive", "--nnodes", "2", "--script",
                     "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "a multi-node config needs node 0's address" in result.stderr
    assert "--master-addr HOST" in result.stderr
    assert not (tmp_path / "distrun.yaml").exists()


def test_init_with_no_input_says_it_needs_answers_not_aborted(tmp_path: Path) -> None:
    with open("/dev/null") as nothing:
        run = subprocess.run([sys.executable, "-m", "distrun", "config", "init"],
                             stdin=nothing, cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)
    assert run.returncode == 2, run.stderr
    assert "aborted" not in run.stderr
    assert "input ended" in run.stderr and "--non-interactive" in run.stderr
    assert not (tmp_path / "distrun.yaml").exists()


def test_init_with_answers_that_end_early_is_exit_2(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "distrun", "config", "init"],
                         input="train.py\ntorchrun\n", cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2
    assert "input ended" in run.stderr


def test_init_prints_the_validate_and_launch_commands_and_they_work(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hello', flush=True)\n")
    result = distrun("config", "init", "--non-interactive", "--script", "train.py",
                     "-o", "job.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "wrote job.yaml"
    check = next(line for line in lines if line.startswith("check it:"))
    launch = next(line for line in lines if line.startswith("run it:"))
    assert check.split(":", 1)[1].strip() == "distrun config validate job.yaml"
    assert launch.split(":", 1)[1].strip() == "distrun launch --config job.yaml"
    validated = distrun(*shlex.split(check.split(":", 1)[1])[1:], cwd=tmp_path)
    assert validated.returncode == 0, validated.stdout
    dry = distrun(*shlex.split(launch.split(":", 1)[1])[1:], "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr


def test_init_of_a_multi_node_job_says_each_node_runs_with_its_rank(tmp_path: Path) -> None:
    result = distrun("config", "init", "--non-interactive", "--nnodes", "2", "--master-addr",
                     "10.0.0.1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "distrun launch --config distrun.yaml --node-rank R" in result.stdout


def test_torchrun_and_accelerate_exports_say_the_timeout_is_not_carried() -> None:
    for fmt in ("torchrun", "accelerate"):
        result = distrun("config", "export", "--format", fmt, str(MULTI))
        assert result.returncode == 0, result.stderr
        assert f"warning: --format {fmt}: not carried: timeout 600" in result.stderr
    for fmt in ("slurm", "kubernetes"):  # distrun launch runs there: it applies the timeout
        result = distrun("config", "export", "--format", fmt, str(MULTI))
        assert "not carried" not in result.stderr
        assert "600" in result.stdout


def test_accelerate_export_carries_env_script_args_and_restarts_in_its_command() -> None:
    result = distrun("config", "export", "--format", "accelerate", str(MULTI))
    command = next(line for line in result.stdout.splitlines()
                   if "accelerate launch --config_file" in line)
    words = shlex.split(command.lstrip("#"))
    assert "NCCL_DEBUG=WARN" in words
    assert words[words.index("--max_restarts") + 1] == "1"
    assert words[-5:] == ["train.py", "--epochs", "3", "--name", "run one"]
    assert yaml.safe_load(result.stdout)["mixed_precision"] == "bf16"


def test_log_dir_is_carried_by_the_exports(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("script: train.py\nnproc_per_node: 2\nlog_dir: /scratch/logs\n")
    torchrun = distrun("config", "export", "--format", "torchrun", str(job)).stdout
    assert "--log-dir=/scratch/logs" in torchrun
    accelerate = distrun("config", "export", "--format", "accelerate", str(job)).stdout
    assert "--log_dir /scratch/logs" in accelerate
    slurm = distrun("config", "export", "--format", "slurm", str(job)).stdout
    assert "--log-dir /scratch/logs" in slurm
