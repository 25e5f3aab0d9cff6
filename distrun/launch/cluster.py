"""What a cluster scheduler tells a node about the job: SLURM, and Kubeflow (a Kubeflow
Trainer v2 TrainJob, or a Training Operator v1 PyTorchJob).

Each detector reads only the environment it is given and returns the values it
found, with a note saying where they came from. Explicit options always win.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Detected:
    source: str
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    nproc_per_node: str | None = None


def detect(environ: Mapping[str, str]) -> Detected | None:
    return _slurm(environ) or _kubeflow(environ)


def env_int(environ: Mapping[str, str], *names: str) -> int | None:
    """The first of `names` set to a whole number in `environ`."""
    for name in names:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _slurm(environ: Mapping[str, str]) -> Detected | None:
    if "SLURM_JOB_ID" not in environ or "SLURM_NODEID" not in environ:
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", "")
    hosts = expand_nodelist(nodelist)
    return Detected(
        source=f"SLURM job {environ['SLURM_JOB_ID']}",
        nnodes=env_int(environ, "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        node_rank=env_int(environ, "SLURM_NODEID"),
        master_addr=hosts[0] if hosts else None,
    )


def _kubeflow(environ: Mapping[str, str]) -> Detected | None:
    """Kubeflow: PET_* (torchrun's own variables), which Kubeflow Trainer v2's torch runtime
    always sets and the v1 training operator sets when the job has nprocPerNode; else (v1)
    MASTER_ADDR/MASTER_PORT with RANK and WORLD_SIZE counting pods."""
    if "PET_NNODES" in environ or "PET_NODE_RANK" in environ:
        return Detected(
            source=f"{_kubeflow_kind(environ)} (PET_* variables)",
            nnodes=env_int(environ, "PET_NNODES"),
            node_rank=env_int(environ, "PET_NODE_RANK"),
            master_addr=environ.get("PET_MASTER_ADDR") or environ.get("MASTER_ADDR"),
            master_port=env_int(environ, "PET_MASTER_PORT", "MASTER_PORT"),
            nproc_per_node=environ.get("PET_NPROC_PER_NODE"),
        )
    in_pod = "KUBERNETES_SERVICE_HOST" in environ
    if in_pod and "MASTER_ADDR" in environ and "WORLD_SIZE" in environ and "RANK" in environ:
        return Detected(
            source="Kubeflow PyTorchJob (MASTER_ADDR, RANK, WORLD_SIZE)",
            nnodes=env_int(environ, "WORLD_SIZE"),
            node_rank=env_int(environ, "RANK"),
            master_addr=environ["MASTER_ADDR"],
            master_port=env_int(environ, "MASTER_PORT"),
        )
    return None


def _kubeflow_kind(environ: Mapping[str, str]) -> str:
    """Which Kubeflow job set the PET_* variables, where the pod's environment tells.

    A TrainJob's nodes are the pods of an Indexed Job (a JobSet's), which Kubernetes gives
    JOB_COMPLETION_INDEX (the runtime's PET_NODE_RANK is that index); the v1 operator
    makes bare pods, and gives them RANK and WORLD_SIZE (with a Master) or PET_RDZV_ENDPOINT
    (elastic), which the v2 torch runtime never sets."""
    if "JOB_COMPLETION_INDEX" in environ:
        return "Kubeflow TrainJob"
    if ("RANK" in environ and "WORLD_SIZE" in environ) or "PET_RDZV_ENDPOINT" in environ:
        return "Kubeflow PyTorchJob"
    return "Kubeflow job"


def expand_nodelist(nodelist: str) -> list[str]:
    """`node[01-03,07],gpu5` -> node01, node02, node03, node07, gpu5 (scontrol when present)."""
    if not nodelist:
        return []
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                 text=True, timeout=10, check=True).stdout.split()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    hosts: list[str] = []
    for prefix, ranges, rest in re.findall(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", nodelist):
        if not ranges:
            hosts.append(prefix + rest)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}{rest}")
                continue
            for n in range(int(lo), int(hi) + 1):
                hosts.append(f"{prefix}{str(n).zfill(len(lo))}{rest}")
    return hosts
