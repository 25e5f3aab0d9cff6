"""Render a config for other tools: torchrun, accelerate, SLURM (sbatch) and Kubernetes
(a Kubeflow PyTorchJob). Templates come from `distrun.templates` (the repository's
templates/ folder, shipped in the wheel). Nothing here imports torch.
"""

from __future__ import annotations

import copy
import shlex
from importlib import resources
from typing import Any

import yaml

from distrun.config.load import Config, node_range
from distrun.errors import InputError
from distrun.launch.backends import torchrun
from distrun.launch.spec import LaunchRequest, LaunchSpec
from distrun.launch_rules import DEFAULT_MASTER_PORT, DEFAULT_RDZV_PORT

FORMATS = ("torchrun", "accelerate", "slurm", "kubernetes")


def template(name: str) -> str:
    return resources.files("distrun.templates").joinpath(name).read_text(encoding="utf-8")


def request_from(config: Config) -> LaunchRequest:
    """The launch options the file sets (keys it leaves out stay None, so flags and
    defaults still apply)."""
    v = config.values
    rdzv = v.get("rdzv", {})
    nproc = v.get("nproc_per_node")
    return LaunchRequest(
        script=v.get("script"), script_args=tuple(v.get("script_args", ())),
        module=bool(v.get("module", False)),
        nproc_per_node=str(nproc) if nproc is not None else None,
        nnodes=str(v["nnodes"]) if "nnodes" in v else None, node_rank=v.get("node_rank"),
        master_addr=v.get("master_addr"), master_port=v.get("master_port"),
        rdzv_backend=rdzv.get("backend"), rdzv_endpoint=rdzv.get("endpoint"),
        rdzv_id=rdzv.get("id"), rdzv_conf=dict(rdzv.get("conf", {})),
        max_restarts=v.get("max_restarts"), log_dir=v.get("log_dir"),
        launcher=v.get("launcher"), mixed_precision=v.get("mixed_precision"),
        env=dict(v.get("env", {})), timeout=v.get("timeout"),
    )


def export(config: Config, fmt: str) -> str:
    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    r = config.resolved()
    if not r["script"]:
        raise InputError(f"{config.path}: no `script` set: an export needs the script to run",
                         "add `script: train.py` to the file")
    low, high = node_range(r["nnodes"])
    if (fmt in ("torchrun", "accelerate") and high > 1 and not r["master_addr"]
            and not r["rdzv"]["endpoint"]):
        raise InputError(f"{config.path}: a {fmt} command for a multi-node job needs node 0's "
                         "address", "set master_addr (or rdzv.endpoint) in the file; the "
                         "slurm and kubernetes exports read it from the job instead")
    return {"torchrun": _torchrun, "accelerate": _accelerate, "slurm": _slurm,
            "kubernetes": _kubernetes}[fmt](config, r)


def _spec(r: dict[str, Any]) -> LaunchSpec:
    low, high = node_range(r["nnodes"])
    endpoint = r["rdzv"]["endpoint"]
    port = r["master_port"] or DEFAULT_MASTER_PORT
    return LaunchSpec(
        script=r["script"], script_args=tuple(r["script_args"]), module=r["module"],
        nproc_per_node=r["nproc_per_node"], min_nodes=low, max_nodes=high,
        node_rank=r["node_rank"], master_addr=r["master_addr"] or "127.0.0.1",
        master_port=port, rdzv_backend="c10d" if endpoint else r["rdzv"]["backend"],
        rdzv_endpoint=endpoint, rdzv_id=r["rdzv"]["id"],
        rdzv_conf=tuple(sorted(r["rdzv"]["conf"].items())), max_restarts=r["max_restarts"],
        log_dir=None, launcher=r["launcher"], mixed_precision=r["mixed_precision"],
        env=tuple(sorted(r["env"].items())),
    )


def _user_env(r: dict[str, Any]) -> dict[str, str]:
    env = dict(r["env"])
    if r["mixed_precision"] != "no":
        env.setdefault("DISTRUN_MIXED_PRECISION", r["mixed_precision"])
        env.setdefault("ACCELERATE_MIXED_PRECISION", r["mixed_precision"])
    return env


def _torchrun(config: Config, r: dict[str, Any]) -> str:
    argv = ["torchrun", *torchrun.build(_spec(r)).argv[3:]]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(_user_env(r).items()))
    where = f"node {r['node_rank']} of {r['nnodes']}" if node_range(r["nnodes"])[1] > 1 else \
        "a single node"
    return (f"# torchrun command for {where}, from {config.path}\n"
            f"{env + ' ' if env else ''}{shlex.join(argv)}\n")


def _accelerate(config: Config, r: dict[str, Any]) -> str:
    nproc = r["nproc_per_node"]
    if not isinstance(nproc, int):
        raise InputError(f"{config.path}: accelerate needs nproc_per_node as a number, not "
                         f"{nproc!r}", "set nproc_per_node: N (GPUs per machine)")
    low, high = node_range(r["nnodes"])
    if low != high:
        raise InputError(f"{config.path}: accelerate cannot run an elastic job (nnodes {low}:"
                         f"{high})")
    data = yaml.safe_load(template("accelerate.yaml"))
    total = nproc * high
    data.update(
        num_processes=total, num_machines=high, machine_rank=r["node_rank"],
        mixed_precision=r["mixed_precision"],
        distributed_type="MULTI_GPU" if total > 1 else "NO",
        rdzv_backend="c10d" if r["rdzv"]["endpoint"] else "static",
    )
    if r["rdzv"]["endpoint"]:
        host, _, port = str(r["rdzv"]["endpoint"]).rpartition(":")
        data.update(main_process_ip=host or r["rdzv"]["endpoint"],
                    main_process_port=int(port) if port.isdigit() else DEFAULT_RDZV_PORT)
    elif high > 1 or r["master_addr"]:
        data.update(main_process_ip=r["master_addr"] or "127.0.0.1",
                    main_process_port=r["master_port"] or DEFAULT_MASTER_PORT)
    elif r["master_port"]:
        data.update(main_process_port=r["master_port"])
    return _comments(template("accelerate.yaml")) + yaml.safe_dump(data, sort_keys=True)


def _comments(text: str) -> str:
    """A template's leading comment lines (safe_dump drops comments)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line + "\n")
    return "".join(lines)


def _launch_args(r: dict[str, Any], with_env: bool = True) -> list[str]:
    """`distrun launch` options for a node that learns its rank from the scheduler."""
    args = ["--nproc-per-node", str(r["nproc_per_node"])]
    if r["launcher"] != "torchrun":
        args += ["--launcher", r["launcher"]]
    if r["mixed_precision"] != "no":
        args += ["--mixed-precision", r["mixed_precision"]]
    if r["max_restarts"]:
        args += ["--max-restarts", str(r["max_restarts"])]
    if r["timeout"]:
        args += ["--timeout", f"{r['timeout']:g}"]
    if r["master_port"]:
        args += ["--master-port", str(r["master_port"])]
    for key, value in sorted(r["rdzv"]["conf"].items()):
        args += ["--rdzv-conf", f"{key}={value}"]
    if with_env:
        for key, value in sorted(r["env"].items()):
            args += ["--env", f"{key}={value}"]
    return args


def _target(r: dict[str, Any]) -> list[str]:
    return [*(["-m"] if r["module"] else []), r["script"], *r["script_args"]]


def _slurm(config: Config, r: dict[str, Any]) -> str:
    s = r["slurm"]
    low, high = node_range(r["nnodes"])
    options = []
    for flag, key in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                      ("time", "time"), ("cpus-per-task", "cpus_per_task"), ("mem", "mem"),
                      ("constraint", "constraint"), ("output", "output")):
        if s[key] not in (None, ""):
            options.append(f"#SBATCH --{flag}={s[key]}")
    if s["gpus_per_node"]:
        options.append(f"#SBATCH --gpus-per-node={s['gpus_per_node']}")
    options += [f"#SBATCH {extra}" for extra in s["extra"]]
    launch = ["distrun", "launch", *_launch_args(r)]
    rdzv = ""
    if low != high or r["rdzv"]["endpoint"]:
        port = str(r["rdzv"]["endpoint"] or "").rpartition(":")[2] or str(DEFAULT_RDZV_PORT)
        launch += ["--nnodes", f"{low}:{high}" if low != high else str(high),
                   "--rdzv-id", r["rdzv"]["id"] if r["rdzv"]["id"] != "none" else "$SLURM_JOB_ID"]
        rdzv = f' --rdzv-endpoint "${{MASTER_ADDR}}:{port}"'
    command = shlex.join(launch).replace("'$SLURM_JOB_ID'", '"$SLURM_JOB_ID"') + rdzv
    command += " " + shlex.join(_target(r))
    text = template("slurm.sbatch")
    for name, value in {
        "source": config.path, "job_name": s["job_name"],
        "nodes": f"{low}-{high}" if low != high else str(high),
        "sbatch_options": "\n".join(options), "setup": "\n".join(s["setup"]),
        "command": command,
    }.items():
        text = text.replace(f"@@{name}@@", value)
    return text


def _kubernetes(config: Config, r: dict[str, Any]) -> str:
    k = r["kubernetes"]
    if not k["image"]:
        raise InputError(f"{config.path}: kubernetes.image is not set",
                         "add kubernetes: {image: REGISTRY/IMAGE:TAG} (with PyTorch, distrun "
                         "and your script)")
    low, high = node_range(r["nnodes"])
    job = yaml.safe_load(template("pytorchjob.yaml"))
    job["metadata"].update(name=k["name"], namespace=k["namespace"])
    job["spec"]["nprocPerNode"] = str(r["nproc_per_node"])
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    container = master["template"]["spec"]["containers"][0]
    container.update(image=k["image"], imagePullPolicy=k["image_pull_policy"],
                     command=["distrun", "launch", *_launch_args(r, with_env=False),
                              *_target(r)])
    if k["working_dir"]:
        container["workingDir"] = k["working_dir"]
    if r["env"]:
        container["env"] = [{"name": n, "value": v} for n, v in sorted(r["env"].items())]
    # Quantities as strings ('4', not 4): their type in the Kubernetes OpenAPI spec, and the
    # form the API server gives back (the operator's CRD also takes integers).
    resources_: dict[str, str] = {}
    if k["gpus_per_node"]:
        resources_["nvidia.com/gpu"] = str(k["gpus_per_node"])
    for key in ("cpu", "memory"):
        if k[key]:
            resources_[key] = str(k[key])
    if resources_:
        container["resources"] = {"limits": resources_, "requests": dict(resources_)}
    master["restartPolicy"] = k["restart_policy"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    if low != high:
        worker = specs.pop("Master")
        worker["replicas"] = high
        specs["Worker"] = worker
        job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": low,
                                        "maxReplicas": high,
                                        "maxRestarts": r["max_restarts"] or 3}
    elif high > 1:
        worker = copy.deepcopy(master)
        worker["replicas"] = high - 1
        specs["Worker"] = worker
    return _comments(template("pytorchjob.yaml")) + yaml.safe_dump(job, sort_keys=False)
