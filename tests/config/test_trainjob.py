"""`config export --format trainjob`: what it says on stderr (what is not carried, the same
sentences as in the manifest; and `--format kubernetes` pointing to it once), what it
refuses, and, end to end, its command run as a TrainJob's two pods with the variables
the torch runtime sets: `distrun launch` finds its job there and the world forms.

The manifests themselves are golden files (test_exports.py), checked against the
TrainJob CRD in test_kubeflow_crds.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from distrun.config.exports import FORMATS, export, not_carried
from distrun.config.load import load
from distrun.errors import InputError
from distrun.launch.resolve import free_port
from tests.conftest import distrun

GOLDEN = Path(__file__).parent / "golden"
IMAGE = "kubernetes:\n  image: ghcr.io/example/train:1.0\n"


def exported(tmp_path: Path, text: str) -> tuple[dict[str, Any], list[str]]:
    """The TrainJob a config exports to, and what is not carried."""
    (tmp_path / "distrun.yaml").write_text(text)
    config = load(str(tmp_path / "distrun.yaml"))
    job: dict[str, Any] = yaml.safe_load(export(config, "trainjob"))
    return job, not_carried(config, "trainjob")


def test_the_cli_offers_every_export_format() -> None:
    from distrun.cli.config import export as command

    (fmt,) = [p for p in command.params if p.name == "fmt"]
    assert sorted(getattr(fmt.type, "choices", ())) == sorted(FORMATS)


def test_what_is_not_carried_is_said_on_stderr_and_in_the_manifest() -> None:
    run = distrun("config", "export", "--format", "trainjob", "three.yaml", cwd=GOLDEN)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (GOLDEN / "three.trainjob.yaml").read_text()
    said = [line.removeprefix("distrun: warning: --format trainjob: not carried: ")
            for line in run.stderr.splitlines()]
    assert [s.split(":")[0] for s in said] == [
        "kubernetes.image_pull_policy Always", "kubernetes.restart_policy Never",
        "kubernetes.working_dir /workspace/project"]
    title = "# Not carried (a TrainJob has no field for it, or the runtime sets it):\n"
    block = run.stdout.split(title)[1].split("\napiVersion:")[0]
    assert " ".join(block.replace("#   ", "").replace("# - ", "\n").split()) == \
        " ".join("\n".join(said).split())


def test_kubernetes_export_names_trainjob_once() -> None:
    run = distrun("config", "export", "--format", "kubernetes", "single.yaml", cwd=GOLDEN)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        "distrun: note: --format kubernetes writes a PyTorchJob for the Kubeflow Training "
        "Operator v1 (maintained on its release-1.9 branch only); Kubeflow Trainer v2 "
        "replaced it with TrainJob: --format trainjob"]
    assert yaml.safe_load(run.stdout)["kind"] == "PyTorchJob"
    clean = distrun("config", "export", "--format", "trainjob", "single.yaml", cwd=GOLDEN)
    assert (clean.returncode, clean.stderr) == (0, "")


def test_the_runtimes_variables_stay_the_runtimes(tmp_path: Path) -> None:
    job, lost = exported(tmp_path, f"script: t.py\nenv:\n  PET_MASTER_PORT: '1234'\n"
                                   f"  KEEP: 'yes'\nmaster_port: 29511\n{IMAGE}")
    trainer = job["spec"]["trainer"]
    assert trainer["env"] == [{"name": "KEEP", "value": "yes"}]
    assert "--master-port" not in trainer["command"]
    assert [line.split(":")[0] for line in lost] == ["master_port 29511", "env PET_MASTER_PORT"]


def test_runtime_and_processes_as_the_runtime_expects_them(tmp_path: Path) -> None:
    job, lost = exported(tmp_path, "script: t.py\nnproc_per_node: gpu\nkubernetes:\n"
                                   "  image: i:1\n  runtime: torch-cuda-128\n")
    assert job["spec"]["runtimeRef"] == {"name": "torch-cuda-128"}
    # the field is an integer: a word is left to the runtime's default (auto) and to the
    # command, which says it to distrun
    assert "numProcPerNode" not in job["spec"]["trainer"]
    assert job["spec"]["trainer"]["command"][2:4] == ["--nproc-per-node", "gpu"]
    assert lost == []


@pytest.mark.parametrize(("kubernetes", "refusal"), [
    ("  name: 7-job\n", "a TrainJob's name is a DNS label"),
    (f"  name: {'x' * 64}\n", "at most 63 characters"),
    ("  namespace: team\n", "kubernetes.image is not set"),
])
def test_what_no_trainjob_can_be_is_refused(tmp_path: Path, kubernetes: str,
                                            refusal: str) -> None:
    image = "" if "image" in refusal else "  image: i:1\n"
    with pytest.raises(InputError, match=refusal):
        exported(tmp_path, f"script: t.py\nkubernetes:\n{image}{kubernetes}")


ALL_REDUCE = """\
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
sys.stdout.write(f"rank {dist.get_rank()} world {dist.get_world_size()} sum {t.item():g} "
                 f"{os.environ.get('FROM_TRAINER_ENV')}\\n")
dist.destroy_process_group()
"""


@pytest.mark.e2e
def test_exported_command_runs_as_the_trainjobs_pods(tmp_path: Path) -> None:
    """Two "pods" on loopback, each with the exported command and trainer.env, and what
    Kubeflow Trainer v2.3.0's torch runtime adds: PET_NNODES (numNodes), PET_NPROC_PER_NODE
    (numProcPerNode), PET_NODE_RANK and JOB_COMPLETION_INDEX (the pod's index),
    PET_MASTER_ADDR (node 0's pod; 127.0.0.1 here) and PET_MASTER_PORT."""
    (tmp_path / "job.py").write_text(ALL_REDUCE)
    (tmp_path / "distrun.yaml").write_text(
        f"script: {tmp_path / 'job.py'}\nnnodes: 2\nnproc_per_node: 1\n"
        f"env:\n  FROM_TRAINER_ENV: carried\n{IMAGE}")
    run = distrun("config", "export", "--format", "trainjob", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    trainer = yaml.safe_load(run.stdout)["spec"]["trainer"]
    assert trainer["command"][:2] == ["distrun", "launch"]
    port = str(free_port())
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_"))}
    base.update({e["name"]: e["value"] for e in trainer["env"]})
    pods = []
    for index in range(trainer["numNodes"]):
        env = {**base, "PET_NNODES": str(trainer["numNodes"]),
               "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
               "PET_NODE_RANK": str(index), "JOB_COMPLETION_INDEX": str(index),
               "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port}
        pods.append(subprocess.Popen(
            [sys.executable, "-m", "distrun", *trainer["command"][1:]], cwd=tmp_path, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [(pod, *pod.communicate(timeout=180)) for pod in pods]
    lines = []
    for index, (pod, out, err) in enumerate(results):
        assert pod.returncode == 0, err
        assert (f"distrun: from the Kubeflow TrainJob (PET_* variables): nnodes=2, "
                f"node_rank={index}, master_addr=127.0.0.1, master_port={port}") in err
        lines += [line for line in out.splitlines() if line.startswith("rank ")]
    assert sorted(lines) == ["rank 0 world 2 sum 2 carried", "rank 1 world 2 sum 2 carried"]
