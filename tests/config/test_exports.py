"""Exports: golden outputs, and each one checked by the tool that reads it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from distrun.config.exports import export
from distrun.config.load import load
from tests.conftest import distrun

GOLDEN = Path(__file__).parent / "golden"
CASES = [(config, fmt) for config in ("multi", "elastic")
         for fmt in ("torchrun", "accelerate", "slurm", "kubernetes", "trainjob")
         if not (config == "elastic" and fmt == "accelerate")]
CASES += [(config, fmt) for config in ("single", "three") for fmt in ("kubernetes", "trainjob")]
UPDATE = os.environ.get("DISTRUN_UPDATE_FIXTURES") == "1"
SUFFIX = {"torchrun": "sh", "accelerate": "accelerate.yaml", "slurm": "sbatch",
          "kubernetes": "k8s.yaml", "trainjob": "trainjob.yaml"}


def rendered(config: str, fmt: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(GOLDEN)
    return export(load(f"{config}.yaml"), fmt)


@pytest.mark.parametrize(("config", "fmt"), CASES)
def test_export_matches_golden(config: str, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(config, fmt, monkeypatch)
    golden = GOLDEN / f"{config}.{SUFFIX[fmt]}"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def test_elastic_accelerate_export_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from distrun.errors import InputError

    with pytest.raises(InputError, match="elastic|number"):
        rendered("elastic", "accelerate", monkeypatch)


@pytest.mark.parametrize("config", ["multi", "elastic"])
def test_sbatch_script_is_valid_bash_and_keeps_node_values_to_slurm(
        config: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(rendered(config, "slurm", monkeypatch))
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "--node-rank" not in text  # each task reads SLURM_NODEID itself, never node 0's
    assert "SLURM_NODEID" not in text.split("srun", 1)[1]


@pytest.mark.parametrize("config", ["multi", "elastic"])
def test_kubernetes_manifest_is_a_pytorchjob(config: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    job = yaml.safe_load(rendered(config, "kubernetes", monkeypatch))
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    total = sum(spec["replicas"] for spec in replicas.values())
    assert total == (2 if config == "multi" else 4)
    for spec in replicas.values():
        container = spec["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"  # the operator looks for this name
        assert container["command"][:2] == ["distrun", "launch"]


def test_accelerate_export_loads_with_accelerates_own_loader(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    out = tmp_path / "acc.yaml"
    out.write_text(rendered("multi", "accelerate", monkeypatch))
    cfg = load_config_from_file(str(out))
    assert (cfg.num_processes, cfg.num_machines, cfg.machine_rank) == (8, 2, 1)
    assert (cfg.main_process_ip, cfg.main_process_port) == ("10.0.0.1", 29511)
    assert str(cfg.mixed_precision) == "bf16"


@pytest.mark.e2e
def test_accelerate_launch_runs_the_exported_config(tmp_path: Path) -> None:
    """`accelerate launch --config_file OUT` really runs 2 CPU processes from the export."""
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1); dist.all_reduce(t)\n"
        "sys.stdout.write(f'rank {dist.get_rank()} world {dist.get_world_size()} "
        "sum {t.item():g}\\n')  # one write: lines of the two ranks never interleave\n"
        "dist.destroy_process_group()\n")
    (tmp_path / "distrun.yaml").write_text(f"script: {script}\nnproc_per_node: 2\n")
    exported = distrun("config", "export", "--format", "accelerate", "-o", "acc.yaml",
                       cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    accelerate = Path(sys.executable).with_name("accelerate")
    run = subprocess.run([str(accelerate), "launch", "--config_file", "acc.yaml", str(script)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    lines = sorted(line for line in run.stdout.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0 world 2 sum 2", "rank 1 world 2 sum 2"]


def test_torchrun_export_is_the_command_for_this_node(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered("multi", "torchrun", monkeypatch)
    command = text.splitlines()[-1]
    assert command.startswith("ACCELERATE_MIXED_PRECISION=bf16 DISTRUN_MIXED_PRECISION=bf16 "
                              "NCCL_DEBUG=WARN torchrun ")
    assert "'run one'" in command
    # max_restarts 1: a c10d rendezvous at node 0's address (a static one does not survive
    # a restart), which ranks the nodes itself
    assert "--rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29511 --rdzv-id=distrun-29511 " \
        "--max-restarts=1" in command and "--node-rank" not in command
    assert "a restart\n# does not survive" in text
    assert shutil.which("bash") is not None


def test_torchrun_export_without_restarts_keeps_the_static_rendezvous(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    text = (GOLDEN / "multi.yaml").read_text().replace("max_restarts: 1", "max_restarts: 0")
    (tmp_path / "norestart.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    command = export(load("norestart.yaml"), "torchrun").splitlines()[-1]
    assert "--node-rank=1 --master-addr=10.0.0.1 --master-port=29511" in command
    assert "rdzv" not in command
