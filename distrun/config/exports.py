"""Render a config for other tools: torchrun, accelerate, SLURM (sbatch), Kubernetes (a
Kubeflow PyTorchJob: pytorchjob.py; a Kubeflow Trainer v2 TrainJob: trainjob.py) and
DeepSpeed (its JSON config, and the commands that run it). Templates come from
`distrun.templates` (the repository's templates/ folder, shipped in the wheel); the
helpers several exports share are in export_common.py. Nothing here imports torch.

Every export gives the workers DS_CONFIG when the file sets `deepspeed.config` (its path
as seen from where distrun.yaml is read), as `distrun launch --config` does.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from distrun.config import deepspeed_job, pytorchjob, slurm_export, trainjob
from distrun.config.export_common import comments, launch_args, target, template, user_env
from distrun.config.load import Config, node_range
from distrun.errors import InputError
from distrun.launch.backends import torchrun
from distrun.launch.spec import LaunchRequest, LaunchSpec
from distrun.launch_rules import DEFAULT_MASTER_PORT, DEFAULT_RDZV_PORT

FORMATS = ("torchrun", "accelerate", "slurm", "kubernetes", "trainjob", "deepspeed")


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
        env={**deepspeed_job.ds_config_env(config, absolute=True), **v.get("env", {})},
        timeout=v.get("timeout"),
    )


def export(config: Config, fmt: str) -> str:
    """The export as text (for `deepspeed`: the JSON config; see `export_deepspeed`)."""
    if fmt == "deepspeed":
        return export_deepspeed(config).json
    r = _checked(config, fmt)
    return {"torchrun": _torchrun, "accelerate": _accelerate, "slurm": _slurm,
            "kubernetes": pytorchjob.render, "trainjob": trainjob.render}[fmt](config, r)


def not_carried(config: Config, fmt: str) -> list[str]:
    """What the file sets that the `fmt` export cannot carry, one sentence each (the CLI
    says them on standard error; the export itself is still written)."""
    r = config.resolved()
    lost = []
    if r["timeout"] and fmt in ("torchrun", "accelerate"):
        lost.append(f"timeout {r['timeout']:g}: {fmt} has no hang detector; `distrun launch "
                    f"--config {config.path}` (or the slurm, kubernetes and trainjob exports) "
                    "applies it")
    if fmt == "trainjob":
        lost += trainjob.not_carried(config, r)
    return lost


def notes(fmt: str) -> list[str]:
    """What a user of the `fmt` export should know (the CLI says it once, on stderr)."""
    return [pytorchjob.SUCCESSOR] if fmt == "kubernetes" else []


def _checked(config: Config, fmt: str) -> dict[str, Any]:
    """The resolved config, once what every export needs is there."""
    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    r = config.resolved()
    if not r["script"]:
        raise InputError(f"{config.path}: no `script` set: an export needs the script to run",
                         "add `script: train.py` to the file")
    low, high = node_range(r["nnodes"])
    if (fmt in ("torchrun", "accelerate", "deepspeed") and high > 1 and not r["master_addr"]
            and not r["rdzv"]["endpoint"]):
        raise InputError(f"{config.path}: a {fmt} command for a multi-node job needs node 0's "
                         "address", "set master_addr (or rdzv.endpoint) in the file; the "
                         "slurm, kubernetes and trainjob exports read it from the job instead")
    r["env"] = {**deepspeed_job.ds_config_env(config, absolute=False), **r["env"]}
    return r


@dataclass(frozen=True)
class DeepSpeedExport:
    json: str  # the DeepSpeed config
    files: dict[str, str]  # path -> text, for -o: the config, and a multi-node job's hostfile
    commands: str  # shell lines (comments and commands) that run the job with that config


def export_deepspeed(config: Config, output: str | None = None) -> DeepSpeedExport:
    """The job's DeepSpeed config, and the commands that run it with that config:
    DeepSpeed's `deepspeed` and `distrun launch --launcher deepspeed`. `output`: where the
    config is to be written, a .json file or a folder (FOLDER/ds_config.json)."""
    r = _checked(config, "deepspeed")
    _deepspeed_can_run(config, r)
    data, source = deepspeed_job.ds_config(config, r)
    folder = output is not None and (output.endswith(os.sep) or os.path.isdir(output))
    path = os.path.join(output, deepspeed_job.NAME) if output and folder else (
        output or deepspeed_job.NAME)
    files = {path: json.dumps(data, indent=2) + "\n"}
    high = node_range(r["nnodes"])[1]
    hostfile = os.path.join(os.path.dirname(path), "hostfile") if high > 1 else None
    if hostfile:
        files[hostfile] = ("# DeepSpeed hostfile: one line per node; with --no_ssh the names "
                           "only count the nodes\n" + "".join(
                               f"node{i} slots={r['nproc_per_node']}\n" for i in range(high)))
    r["env"] = {**r["env"], "DS_CONFIG": path}
    launch = ["distrun", "launch", *launch_args({**r, "launcher": "deepspeed"})]
    if high > 1:
        launch += ["--nnodes", str(high), "--node-rank", str(r["node_rank"]),
                   "--master-addr", r["master_addr"]]
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(user_env(r).items()))
    where = (f"on every node with its own --node_rank (this one: node {r['node_rank']} of "
             f"{high}), the hostfile beside the config") if high > 1 else "on this machine"
    commands = (f"# DeepSpeed config: {path} (from {source})\n"
                f"# DeepSpeed's launcher, {where}:\n"
                f"{prefix} {shlex.join(_deepspeed_argv(r, hostfile))}\n"
                "# the same job through distrun (ranks supervised, a failure named):\n"
                f"{shlex.join([*launch, *target(r)])}\n")
    return DeepSpeedExport(json=files[path], files=files, commands=commands)


def _deepspeed_can_run(config: Config, r: dict[str, Any]) -> None:
    """Refuse what DeepSpeed's launcher cannot run (as `distrun launch` refuses it)."""
    low, high = node_range(r["nnodes"])
    nproc = r["nproc_per_node"]
    if low != high or r["rdzv"]["endpoint"]:
        raise InputError(f"{config.path}: DeepSpeed's launcher has no rendezvous: every node "
                         "starts with node 0's address and its own rank",
                         "set a fixed nnodes and master_addr, without rdzv.endpoint")
    if r["max_restarts"]:
        raise InputError(f"{config.path}: DeepSpeed's launcher restarts nothing "
                         f"(max_restarts {r['max_restarts']})", "set max_restarts: 0")
    if not isinstance(nproc, int) and (high > 1 or nproc == "cpu"):
        raise InputError(f"{config.path}: DeepSpeed's launcher needs nproc_per_node as a "
                         f"number here, not {nproc!r}", "set nproc_per_node: N")


def _deepspeed_argv(r: dict[str, Any], hostfile: str | None) -> list[str]:
    """DeepSpeed's `deepspeed` command (deepspeed 0.19.8's launcher/runner.py): without a
    hostfile it runs on this machine only, at 127.0.0.1 (--num_nodes above 1 is refused);
    across machines it needs a hostfile of `HOST slots=N` lines, and `--no_ssh --node_rank
    R` starts each node's processes where it runs, as distrun does, instead of node 0
    starting them all over pdsh, which passes few environment variables on. `--num_gpus`
    left out (nproc_per_node auto or gpu): every GPU."""
    argv = ["deepspeed"]
    if hostfile:
        argv += ["--hostfile", hostfile, "--no_ssh", "--node_rank", str(r["node_rank"]),
                 "--num_nodes", str(node_range(r["nnodes"])[1]), "--master_addr",
                 r["master_addr"]]
    if isinstance(r["nproc_per_node"], int):
        argv += ["--num_gpus", str(r["nproc_per_node"])]
    if r["master_port"] or hostfile:
        argv += ["--master_port", str(r["master_port"] or DEFAULT_MASTER_PORT)]
    return [*argv, "--no_local_rank", *(["--module"] if r["module"] else []), r["script"],
            *r["script_args"]]


def _spec(r: dict[str, Any]) -> LaunchSpec:
    low, high = node_range(r["nnodes"])
    endpoint = r["rdzv"]["endpoint"]
    port = r["master_port"] or DEFAULT_MASTER_PORT
    rdzv_id = r["rdzv"]["id"]
    if r["max_restarts"] and not endpoint:  # as `distrun launch` does (_restart_note)
        endpoint = f"{r['master_addr'] or '127.0.0.1'}:{port}"
        rdzv_id = rdzv_id if rdzv_id not in ("", "none") else f"distrun-{port}"
    return LaunchSpec(
        script=r["script"], script_args=tuple(r["script_args"]), module=r["module"],
        nproc_per_node=r["nproc_per_node"], min_nodes=low, max_nodes=high,
        node_rank=r["node_rank"], master_addr=r["master_addr"] or "127.0.0.1",
        master_port=port, rdzv_backend="c10d" if endpoint else r["rdzv"]["backend"],
        rdzv_endpoint=endpoint, rdzv_id=rdzv_id,
        rdzv_conf=tuple(sorted(r["rdzv"]["conf"].items())), max_restarts=r["max_restarts"],
        log_dir=r["log_dir"], launcher=r["launcher"], mixed_precision=r["mixed_precision"],
        env=tuple(sorted(r["env"].items())),
    )


def _torchrun(config: Config, r: dict[str, Any]) -> str:
    argv = ["torchrun", *torchrun.build(_spec(r)).argv[3:]]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(user_env(r).items()))
    where = f"node {r['node_rank']} of {r['nnodes']}" if node_range(r["nnodes"])[1] > 1 else \
        "a single node"
    note = ("# launcher: deepspeed in the file; torchrun runs a script converted --to "
            "deepspeed too (DeepSpeed's own launcher: --format deepspeed)\n"
            if r["launcher"] == "deepspeed" else "")
    return (f"# torchrun command for {where}, from {config.path}\n{note}{_restart_note(r)}"
            f"{env + ' ' if env else ''}{shlex.join(argv)}\n")


def _restart_note(r: dict[str, Any]) -> str:
    """Restarts need a c10d rendezvous: torchrun's static one does not survive a restart
    (the restarted workers meet in a store that still holds the first attempt's keys)."""
    if not r["max_restarts"] or r["rdzv"]["endpoint"]:
        return ""
    many = node_range(r["nnodes"])[1] > 1
    return ("# max_restarts: a c10d rendezvous at node 0's address, not the static one, "
            "which a restart\n# does not survive" + (
                " (c10d ranks the nodes in the order they join)" if many else "") + "\n")


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
        rdzv_backend="c10d" if r["rdzv"]["endpoint"] or r["max_restarts"] else "static",
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
    return (comments(template("accelerate.yaml")) + _accelerate_run(r)
            + yaml.safe_dump(data, sort_keys=True))


def _accelerate_run(r: dict[str, Any]) -> str:
    """The `accelerate launch` line for the file, as a comment: what accelerate's config
    has no key for (the script and its arguments, the environment, restarts, the rdzv
    settings, the log folder) goes on the command line."""
    env = user_env(r)
    env.pop("ACCELERATE_MIXED_PRECISION", None)  # the file's mixed_precision says it
    argv = ["accelerate", "launch", "--config_file", "THIS_FILE"]
    if r["max_restarts"]:
        argv += ["--max_restarts", str(r["max_restarts"])]
    if r["rdzv"]["conf"]:
        argv += ["--rdzv_conf", ",".join(f"{k}={v}" for k, v in sorted(r["rdzv"]["conf"].items()))]
    if r["log_dir"]:
        argv += ["--log_dir", r["log_dir"], "--tee", "3"]
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(env.items()))
    return f"#   {prefix}{shlex.join([*argv, *target(r)])}\n"


def _slurm(config: Config, r: dict[str, Any]) -> str:
    return slurm_export.render(config, r, launch_args(r), target(r), template("slurm.sbatch"))
