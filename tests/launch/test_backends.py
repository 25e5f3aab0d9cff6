"""Golden tests: the exact command each backend builds for a resolved spec."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from distrun.launch.backends import build
from distrun.launch.spec import LaunchSpec
from tests.conftest import distrun

PY = sys.executable
BASE = dict(script="train.py", script_args=("--epochs", "3"), log_dir="/logs")

GOLDEN = {
    "torchrun-single-node": (
        LaunchSpec(**BASE, nproc_per_node=2, master_port=30001),
        f"{PY} -m torch.distributed.run --nproc-per-node=2 --nnodes=1 --node-rank=0 "
        "--master-addr=127.0.0.1 --master-port=30001 --max-restarts=0 --log-dir=/logs "
        "--redirects=3 --tee=3 train.py --epochs 3",
    ),
    "torchrun-static-node-1-of-2": (
        LaunchSpec(**BASE, nproc_per_node=4, min_nodes=2, max_nodes=2, node_rank=1,
                   master_addr="10.0.0.1", master_port=29500),
        f"{PY} -m torch.distributed.run --nproc-per-node=4 --nnodes=2 --node-rank=1 "
        "--master-addr=10.0.0.1 --master-port=29500 --max-restarts=0 --log-dir=/logs "
        "--redirects=3 --tee=3 train.py --epochs 3",
    ),
    "torchrun-c10d-elastic-module": (
        LaunchSpec(script="pkg.train", module=True, nproc_per_node=8, min_nodes=1,
                   max_nodes=4, rdzv_backend="c10d", rdzv_endpoint="head:29400",
                   rdzv_id="job7", max_restarts=3, log_dir=None),
        f"{PY} -m torch.distributed.run --nproc-per-node=8 --nnodes=1:4 --rdzv-backend=c10d "
        "--rdzv-endpoint=head:29400 --rdzv-id=job7 --max-restarts=3 -m pkg.train",
    ),
    "torchrun-c10d-host-node-with-its-address": (
        LaunchSpec(**BASE, nproc_per_node=1, min_nodes=2, max_nodes=2, rdzv_backend="c10d",
                   rdzv_endpoint="10.0.0.1:29400", rdzv_id="j", rdzv_is_host=True,
                   local_addr="10.0.0.1"),
        f"{PY} -m torch.distributed.run --nproc-per-node=1 --nnodes=2 --rdzv-backend=c10d "
        "--rdzv-endpoint=10.0.0.1:29400 --rdzv-id=j --rdzv-conf=is_host=1 "
        "--local-addr=10.0.0.1 --max-restarts=0 --log-dir=/logs --redirects=3 --tee=3 "
        "train.py --epochs 3",
    ),
    "torchrun-c10d-settings-merged-with-is-host": (
        LaunchSpec(script="t.py", min_nodes=1, max_nodes=2, rdzv_backend="c10d",
                   rdzv_endpoint="10.0.0.1:29400", rdzv_is_host=True,
                   rdzv_conf=(("join_timeout", "900"), ("last_call_timeout", "5"))),
        f"{PY} -m torch.distributed.run --nproc-per-node=1 --nnodes=1:2 --rdzv-backend=c10d "
        "--rdzv-endpoint=10.0.0.1:29400 --rdzv-id=none "
        "--rdzv-conf=is_host=1,join_timeout=900,last_call_timeout=5 --max-restarts=0 t.py",
    ),
    "accelerate-c10d-host-node": (
        LaunchSpec(**BASE, launcher="accelerate", nproc_per_node=1, min_nodes=2, max_nodes=2,
                   rdzv_backend="c10d", rdzv_endpoint="10.0.0.1:29400", rdzv_is_host=True,
                   local_addr="10.0.0.1"),
        f"{PY} -m accelerate.commands.launch --num_processes=2 --num_machines=2 "
        "--mixed_precision=no --dynamo_backend=no --multi_gpu --machine_rank=0 "
        "--rdzv_backend=c10d --main_process_ip=10.0.0.1 --main_process_port=29400 "
        "--rdzv_conf=is_host=1 --max_restarts=0 --log_dir=/logs --tee=3 train.py --epochs 3",
    ),
    "accelerate-single-node": (
        LaunchSpec(**BASE, launcher="accelerate", nproc_per_node=2, master_port=30001,
                   mixed_precision="bf16"),
        f"{PY} -m accelerate.commands.launch --num_processes=2 --num_machines=1 "
        "--mixed_precision=bf16 --dynamo_backend=no --multi_gpu --main_process_ip=127.0.0.1 "
        "--main_process_port=30001 --max_restarts=0 --log_dir=/logs --tee=3 train.py --epochs 3",
    ),
    "accelerate-static-node-1-of-2": (
        LaunchSpec(**BASE, launcher="accelerate", nproc_per_node=4, min_nodes=2, max_nodes=2,
                   node_rank=1, master_addr="10.0.0.1", master_port=29500),
        f"{PY} -m accelerate.commands.launch --num_processes=8 --num_machines=2 "
        "--mixed_precision=no --dynamo_backend=no --multi_gpu --machine_rank=1 "
        "--main_process_ip=10.0.0.1 --main_process_port=29500 --same_network --max_restarts=0 "
        "--log_dir=/logs --tee=3 train.py --epochs 3",
    ),
    "accelerate-one-process": (
        LaunchSpec(**BASE, launcher="accelerate", nproc_per_node=1, master_port=30001),
        f"{PY} -m accelerate.commands.launch --num_processes=1 --num_machines=1 "
        "--mixed_precision=no --dynamo_backend=no --main_process_ip=127.0.0.1 "
        "--main_process_port=30001 --max_restarts=0 --log_dir=/logs --tee=3 train.py --epochs 3",
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_backend_builds_the_expected_command(case: str) -> None:
    spec, expected = GOLDEN[case]
    assert build(spec).argv == shlex.split(expected)


def test_every_backend_exports_mixed_precision_and_user_env() -> None:
    for launcher in ("torchrun", "accelerate"):
        spec = LaunchSpec(script="t.py", launcher=launcher, mixed_precision="fp16",
                          env=(("WANDB_MODE", "offline"),))
        env = build(spec).env
        assert env["DISTRUN_MIXED_PRECISION"] == "fp16"
        assert env["ACCELERATE_MIXED_PRECISION"] == "fp16"
        assert env["WANDB_MODE"] == "offline"
        assert env["PYTHONUNBUFFERED"] == "1"


def test_accelerate_gets_the_local_address_through_torchruns_environment() -> None:
    spec = LaunchSpec(script="t.py", launcher="accelerate", min_nodes=2, max_nodes=2,
                      rdzv_backend="c10d", rdzv_endpoint="h:1", local_addr="10.0.0.2")
    assert build(spec).env["PET_LOCAL_ADDR"] == "10.0.0.2"
    assert "PET_LOCAL_ADDR" not in build(LaunchSpec(script="t.py", launcher="accelerate")).env


def test_cli_dry_run_prints_the_command_and_starts_nothing(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = distrun("launch", "--nproc-per-node", "3", "--env", "A=1", "--dry-run",
                     str(script), "--lr", "1")
    assert result.returncode == 0, result.stderr
    env_line, command_line = result.stdout.strip().split("\\\n")
    assert "A=1" in env_line.split()
    argv = shlex.split(command_line)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=3" in argv
    port = int(next(a for a in argv if a.startswith("--master-port=")).split("=")[1])
    assert 1 <= port <= 65535
    assert f"master port {port} chosen" in result.stderr
    assert argv[-3:] == [str(script), "--lr", "1"]


def test_double_dash_passes_everything_after_it_to_the_script(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    result = distrun("launch", "--dry-run", "--", str(script), "--nproc-per-node", "9")
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout.split("\\\n")[1])[-3:] == [str(script), "--nproc-per-node",
                                                                "9"]
