"""Checking a launch before anything starts, and filling it from the cluster's environment."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from distrun.errors import LaunchError
from distrun.launch import cluster
from distrun.launch.resolve import resolve
from distrun.launch.spec import LaunchRequest
from tests.conftest import distrun


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


BAD = [
    ("missing script", dict(script="nope/train.py"), "no such file"),
    ("no script", dict(script=None), "no script given"),
    ("nproc 0", dict(nproc_per_node="0"), "at least 1"),
    ("nproc word", dict(nproc_per_node="many"), "auto, gpu or cpu"),
    ("node rank too big", dict(nnodes="2", node_rank=2, master_addr="h"), "outside 0..1"),
    ("node rank negative", dict(nnodes="2", node_rank=-1, master_addr="h"), "outside 0..1"),
    ("multi-node, no address", dict(nnodes="2", node_rank=1), "--master-addr HOST"),
    ("unknown launcher", dict(launcher="mpirun"), "unknown launcher"),
    ("port 0", dict(master_port=0), "outside 1..65535"),
    ("port too big", dict(master_port=70000), "outside 1..65535"),
    ("elastic without endpoint", dict(nnodes="1:4"), "needs a rendezvous backend"),
    ("bad nnodes", dict(nnodes="2:1"), "1 <= MIN <= MAX"),
    ("c10d without endpoint", dict(rdzv_backend="c10d"), "needs --rdzv-endpoint"),
    ("bad endpoint", dict(rdzv_endpoint="host:notaport"), "HOST:PORT"),
    ("accelerate elastic", dict(launcher="accelerate", nnodes="1:2", rdzv_endpoint="h:1"),
     "elastic"),
    ("bad env name", dict(env={"1X": "y"}), "not a valid environment variable"),
    ("negative timeout", dict(timeout=-1.0), "positive"),
    ("empty host label", dict(nnodes="2", master_addr="node..lan"), "not a valid host name"),
    ("endpoint host too long", dict(nnodes="2", rdzv_endpoint="h" * 300 + ":29400"),
     "not a valid host name"),
    ("script name too long", dict(script="s" * 5000), "File name too long"),
    ("rdzv conf without c10d", dict(rdzv_conf={"join_timeout": "9"}), "add --rdzv-endpoint"),
    ("rdzv conf value with comma", dict(rdzv_endpoint="h:1", rdzv_conf={"a": "1,b=2"}),
     "plain value"),
    ("rdzv conf bad name", dict(rdzv_endpoint="h:1", rdzv_conf={"Join Timeout": "9"}),
     "NAME=VALUE"),
]


@pytest.mark.parametrize(("case", "options", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_launch_is_refused_before_starting(script: str, case: str, options: dict[str, object],
                                               message: str) -> None:
    request = LaunchRequest(script=script)
    for key, value in options.items():
        setattr(request, key, value)
    with pytest.raises(LaunchError) as err:
        resolve(request, environ={})
    assert message in f"{err.value.message} {err.value.hint}"
    assert err.value.exit_code == 2


def test_accelerate_missing_is_refused(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(LaunchError, match="accelerate is not installed"):
        resolve(LaunchRequest(script=script, launcher="accelerate"), environ={})


def test_a_busy_master_port_is_refused(script: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = distrun("launch", "--master-port", str(port), script)
    assert result.returncode == 2
    assert f"master port {port} is already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_input_through_the_cli_is_exit_2_with_a_hint(script: str) -> None:
    result = distrun("launch", "--nnodes", "2", "--node-rank", "1", script)
    assert result.returncode == 2
    assert result.stderr.startswith("distrun: error: a multi-node job needs")
    assert "hint:" in result.stderr


def test_single_node_defaults(script: str) -> None:
    spec = resolve(LaunchRequest(script=script), environ={})
    assert (spec.nproc_per_node, spec.nnodes, spec.node_rank, spec.launcher) == (1, "1", 0,
                                                                                 "torchrun")
    assert spec.master_addr == "127.0.0.1" and 1 <= spec.master_port <= 65535
    assert not spec.keep_logs


def test_gpu_is_one_process_per_gpu_and_refused_without_one(script: str) -> None:
    """`gpu` needs a GPU: refused on a CPU-only machine, one process per GPU elsewhere."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        spec = resolve(LaunchRequest(script=script, nproc_per_node="gpu"), environ={})
        assert spec.nproc_per_node == gpus
        return
    with pytest.raises(LaunchError) as err:
        resolve(LaunchRequest(script=script, nproc_per_node="gpu"), environ={})
    assert "no CUDA GPU" in err.value.message and err.value.exit_code == 2


def test_auto_is_one_process_on_a_cpu_only_machine(script: str) -> None:
    import torch

    spec = resolve(LaunchRequest(script=script, nproc_per_node="auto"), environ={})
    assert spec.nproc_per_node == (torch.cuda.device_count() or 1)


def test_slurm_allocation_fills_nodes_rank_and_master(script: str) -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "gpu[07-08]"}
    spec = resolve(LaunchRequest(script=script), environ=env)
    assert (spec.nnodes, spec.node_rank, spec.master_addr) == ("2", 1, "gpu07")
    assert spec.notes == ("from the SLURM job 42: nnodes=2, node_rank=1, master_addr=gpu07",)


def test_flags_win_over_the_cluster(script: str) -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "gpu[07-08]"}
    spec = resolve(LaunchRequest(script=script, master_addr="10.1.1.1"), environ=env)
    assert spec.master_addr == "10.1.1.1" and spec.node_rank == 1


# What each Kubeflow job puts in node 2's pod (of 3, 4 processes each), from the
# controllers' code: Kubeflow Trainer v2.3.0's torch plugin (plugins/torch/torch.go; the
# completion index by Kubernetes, for an Indexed Job's pod), and Training Operator
# v1.9.4's PyTorchJob (controller.v1/pytorch/envvar.go, master.go: a Master, nprocPerNode).
# Without either mark the source is named neutrally.
POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "PET_NNODES": "3", "PET_NODE_RANK": "2",
       "PET_NPROC_PER_NODE": "4"}
KUBEFLOW_PODS = [
    ("Kubeflow TrainJob", {**POD, "JOB_COMPLETION_INDEX": "2",
                           "PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500"},
     ("job-node-0-0.job", 29500)),
    ("Kubeflow PyTorchJob", {**POD, "PYTHONUNBUFFERED": "1", "MASTER_ADDR": "job-master-0",
                             "MASTER_PORT": "23456", "PET_MASTER_ADDR": "job-master-0",
                             "PET_MASTER_PORT": "23456", "WORLD_SIZE": "12", "RANK": "2"},
     ("job-master-0", 23456)),
    ("Kubeflow job", {**POD, "PET_MASTER_ADDR": "head", "PET_MASTER_PORT": "29501"},
     ("head", 29501)),
]


@pytest.mark.parametrize(("source", "env", "master"), KUBEFLOW_PODS,
                         ids=[k[0] for k in KUBEFLOW_PODS])
def test_kubeflow_pod_fills_from_pet_variables_and_names_its_job(
        script: str, source: str, env: dict[str, str], master: tuple[str, int]) -> None:
    spec = resolve(LaunchRequest(script=script), environ=env)
    assert (spec.nnodes, spec.node_rank, spec.nproc_per_node) == ("3", 2, 4)
    assert (spec.master_addr, spec.master_port) == master
    assert spec.notes[0] == (f"from the {source} (PET_* variables): nnodes=3, node_rank=2, "
                             f"master_addr={master[0]}, master_port={master[1]}, "
                             "nproc_per_node=4")


def test_elastic_pytorchjob_is_told_by_its_rendezvous_variable() -> None:
    env = {"PET_NNODES": "1:4", "PET_RDZV_ENDPOINT": "job-worker-0:23456",
           "PET_RDZV_BACKEND": "c10d", "PET_NPROC_PER_NODE": "4"}
    found = cluster.detect(env)
    assert found is not None and found.source == "Kubeflow PyTorchJob (PET_* variables)"
    assert (found.nnodes, found.nproc_per_node) == (None, "4")  # a range is not a count


def test_classic_pytorchjob_counts_pods(script: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "MASTER_ADDR": "job-master-0",
           "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1"}
    spec = resolve(LaunchRequest(script=script), environ=env)
    assert (spec.nnodes, spec.node_rank, spec.master_addr) == ("2", 1, "job-master-0")


@pytest.mark.parametrize(("nodelist", "hosts"), [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("gpu[07-09,12],login", ["gpu07", "gpu08", "gpu09", "gpu12", "login"]),
    ("a[1,3]-ib", ["a1-ib", "a3-ib"]),
])
def test_slurm_nodelist_expansion(nodelist: str, hosts: list[str]) -> None:
    assert cluster.expand_nodelist(nodelist) == hosts
