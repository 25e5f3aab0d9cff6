"""The minimal launcher: torchrun on this machine, with real processes."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tests.conftest import distrun

WORLD = """\
import os
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()} args {os.sys.argv[1:]}", flush=True)
dist.destroy_process_group()
"""


def test_dry_run_prints_torchrun_with_a_free_port(tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text(WORLD)
    result = distrun("launch", "--nproc-per-node", "3", "--dry-run", str(script), "--lr", "1")
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout.strip())
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=3" in argv
    port = int(next(a for a in argv if a.startswith("--master-port=")).split("=")[1])
    assert 1 <= port <= 65535
    assert argv[-3:] == [str(script), "--lr", "1"]


def test_launch_runs_every_rank_with_the_script_arguments(tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text(WORLD)
    result = distrun("launch", "--nproc-per-node", "2", str(script), "--epochs", "3")
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    assert lines == [
        "rank 0 of 2 args ['--epochs', '3']",
        "rank 1 of 2 args ['--epochs', '3']",
    ]


def test_a_failing_rank_fails_the_launch(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    result = distrun("launch", "--nproc-per-node", "2", str(script))
    assert result.returncode == 1
    assert "distrun: error: the job failed" in result.stderr
    assert "Traceback (most recent call last)" not in result.stderr.split("distrun: error")[-1]


def test_missing_script_is_bad_input(tmp_path: Path) -> None:
    result = distrun("launch", "--nproc-per-node", "2", str(tmp_path / "nope.py"))
    assert result.returncode == 2
    assert "no such file" in result.stderr
