"""From what the user typed (and what the cluster says) to a LaunchSpec with no open choice.

Three steps, each refusing a mistake before anything starts (exit code 2, what to change):
1. `from_cluster`: values the user left out, taken from the cluster environment (SLURM,
   a Kubeflow TrainJob or PyTorchJob), noted; flags and the config file (merged by the
   caller into the request) always win.
2. `validate` (validate.py): the launch rules, pure (no sockets, no torch).
3. `settle`: what only this machine can tell: whether accelerate is installed, how many
   GPUs or cores `auto`/`gpu`/`cpu` mean, a free master port or whether the given one is
   taken, the interface that reaches node 0, whether this node hosts the rendezvous.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import os
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from distrun import netinfo
from distrun.errors import LaunchError
from distrun.launch import cluster, slurm_tasks
from distrun.launch.spec import LaunchRequest, LaunchSpec
from distrun.launch.validate import Checked, validate
from distrun.launch_rules import DEFAULT_MASTER_PORT, LAUNCH_ONLY
from distrun.netinfo import free_port

__all__ = ["free_port", "from_cluster", "resolve", "settle", "validate"]
T = TypeVar("T")
SHARED_STORE_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def resolve(req: LaunchRequest, environ: Mapping[str, str] | None = None) -> LaunchSpec:
    """The three steps: the cluster's values, the rules, this machine."""
    environ = os.environ if environ is None else environ
    if req.launcher in LAUNCH_ONLY:  # Ray places the ranks: a scheduler's node rank is not
        return settle(validate(req), environ, [])  # this job's
    filled, notes = from_cluster(req, environ)
    return settle(validate(filled), environ, notes)


def from_cluster(req: LaunchRequest, environ: Mapping[str, str]
                 ) -> tuple[LaunchRequest, list[str]]:
    """`req` with what the scheduler tells filled in where the user gave nothing, and a
    note saying what came from where (nothing with an explicit --rdzv-endpoint). A SLURM
    task that is one rank (slurm_tasks.py) gets that rank's values."""
    task = slurm_tasks.detect(environ, req.slurm_tasks)
    if task is not None:
        return slurm_tasks.fill(req, task, environ)
    found = cluster.detect(environ) if req.rdzv_endpoint is None else None
    if found is None:
        return req, []
    filled: list[str] = []
    nnodes = _fill(req.nnodes, found.nnodes, "nnodes", filled)
    filled_req = dataclasses.replace(
        req, nnodes=None if nnodes is None else str(nnodes),
        node_rank=_fill(req.node_rank, found.node_rank, "node_rank", filled),
        master_addr=_fill(req.master_addr, found.master_addr, "master_addr", filled),
        master_port=_fill(req.master_port, found.master_port, "master_port", filled),
        nproc_per_node=_fill(req.nproc_per_node, found.nproc_per_node, "nproc_per_node",
                             filled))
    notes = [f"from the {found.source}: {', '.join(filled)}"] if filled else []
    return filled_req, notes


def _fill(given: T | None, detected: T | None, name: str, filled: list[str]) -> T | None:
    """A value given by the user wins; else the cluster's (noted in `filled`)."""
    if given is not None or detected is None:
        return given
    filled.append(f"{name}={detected}")
    return detected


def settle(checked: Checked, environ: Mapping[str, str], notes: list[str]) -> LaunchSpec:
    """The checked request made concrete on this machine (network look-ups, GPU count)."""
    notes = list(notes)
    plan = checked.plan
    _launcher_installed(plan.launcher)
    nproc = _processes(checked.nproc_per_node, notes)
    master_addr = checked.master_addr or "127.0.0.1"
    ray = plan.launcher in LAUNCH_ONLY
    master_port = DEFAULT_MASTER_PORT if ray else _master_port(checked, master_addr, notes)
    env = dict(checked.env)
    log_dir = checked.log_dir
    if checked.task is not None and log_dir:  # tasks may share the folder: one each
        log_dir = str(Path(log_dir) / f"rank{checked.task.rank}")
    checked = _restartable(checked, master_addr, master_port, notes)
    plan = checked.plan
    local_addr = None if ray else _local_addr(checked, master_addr, env, environ, notes)
    _shared_store(checked, env, environ, notes)
    is_host = _hosts_rendezvous(checked.endpoint, notes)
    ray_address = _ray_address(checked, environ, notes) if ray else None
    return LaunchSpec(
        script=checked.script, script_args=checked.script_args, module=checked.module,
        nproc_per_node=nproc, min_nodes=plan.nnodes[0], max_nodes=plan.nnodes[1],
        node_rank=plan.node_rank, master_addr=master_addr, master_port=master_port,
        rdzv_backend=plan.rendezvous, rdzv_endpoint=checked.endpoint, rdzv_is_host=is_host,
        local_addr=local_addr, rdzv_conf=tuple(sorted(plan.conf.items())),
        rdzv_id=checked.rdzv_id, max_restarts=checked.max_restarts,
        log_dir=log_dir or _temporary_log_dir(), launcher=plan.launcher,
        mixed_precision=checked.mixed_precision, env=tuple(sorted(env.items())),
        timeout=checked.timeout, cpu=plan.launcher == "accelerate" and not _gpus(),
        notes=tuple(notes), keep_logs=checked.log_dir is not None, task=checked.task,
        ray_address=ray_address)


def _restartable(checked: Checked, master_addr: str, master_port: int, notes: list[str]
                 ) -> Checked:
    """Restarts with torchrun's static rendezvous: the restarted workers meet in a store
    that still holds the first attempt's keys, and gloo then connects to addresses of
    workers that are gone ("connectFullMesh failed ... Connection refused", seen in 2 of
    2 runs with a DDP model). A c10d rendezvous makes a new round, with fresh keys, for
    each restart: the static rendezvous is rewritten into one at node 0's address and
    port (every node rewrites the same command alike), said in a note."""
    if not checked.max_restarts or checked.plan.rendezvous != "static":
        return checked
    import dataclasses

    endpoint = f"{master_addr if checked.multi_node else '127.0.0.1'}:{master_port}"
    plan = dataclasses.replace(checked.plan, backend="c10d", endpoint=endpoint)
    ranks = (" (c10d gives the nodes their ranks in the order they join; --node-rank is "
             "not used)" if checked.multi_node else "")
    notes.append(f"--max-restarts {checked.max_restarts}: c10d rendezvous at {endpoint} "
                 f"instead of the static one, which a restart does not survive{ranks}")
    rdzv_id = checked.rdzv_id if checked.rdzv_id not in ("", "none") else \
        f"distrun-{master_port}"
    return dataclasses.replace(checked, plan=plan, endpoint=endpoint, rdzv_id=rdzv_id)


def _gpus() -> int:
    import torch  # only here: counting GPUs needs it

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _launcher_installed(launcher: str) -> None:
    if launcher == "accelerate" and importlib.util.find_spec("accelerate") is None:
        raise LaunchError("--launcher accelerate: accelerate is not installed here",
                          "pip install accelerate (or distrun[accelerate]), or use torchrun")
    if launcher == "ray" and importlib.util.find_spec("ray") is None:
        raise LaunchError("--launcher ray: Ray is not installed here",
                          "pip install 'distrun[ray]' (Ray with Ray Train), or use torchrun")


def _ray_address(checked: Checked, environ: Mapping[str, str], notes: list[str]
                 ) -> str | None:
    """The Ray cluster to join: --address, else RAY_ADDRESS (as Ray itself reads it: set
    in a Ray job's driver); None: a local cluster, started and stopped by the job."""
    if checked.address:
        return checked.address
    address = environ.get("RAY_ADDRESS", "").strip()
    if address:
        notes.append(f"Ray cluster at {address} (RAY_ADDRESS)")
        return address
    return None


def _processes(nproc: int | str, notes: list[str]) -> int:
    """A number of processes; the words counted here (auto, gpu: GPUs; cpu: cores)."""
    if isinstance(nproc, int):
        return nproc
    if nproc == "cpu":
        count = os.cpu_count() or 1
        notes.append(f"--nproc-per-node cpu: {count} processes (one per CPU core)")
        return count
    gpus = _gpus()
    if nproc == "gpu" and gpus == 0:
        raise LaunchError("--nproc-per-node gpu: no CUDA GPU is visible here",
                          "use a number, or auto (1 process on a CPU-only machine)")
    count = gpus or 1
    notes.append(f"--nproc-per-node {nproc}: {count} process(es) "
                 f"({gpus} GPU(s) visible{'' if gpus else '; 1 on a CPU-only machine'})")
    return count


def _master_port(checked: Checked, master_addr: str, notes: list[str]) -> int:
    """The given port (checked free where this node will listen on it), else 29500 across
    nodes, else a port free here."""
    port = checked.master_port
    if port is None and checked.multi_node:
        return DEFAULT_MASTER_PORT
    if port is None:
        port = free_port()
        notes.append(f"master port {port} chosen (free on this machine)")
    elif (not checked.multi_node or checked.plan.node_rank == 0) and (
            checked.task is None or checked.task.rank == 0):  # where it will be listened on
        err = netinfo.bind_error(master_addr if checked.multi_node else "127.0.0.1", port)
        if err is not None and err.errno == errno.EADDRINUSE:
            raise LaunchError(f"master port {port} is already in use on this machine",
                              "leave --master-port out (a free port is chosen) or pick "
                              "another")
        # another error: an address not on this machine, nothing to check here
    return port


def _local_addr(checked: Checked, master_addr: str, env: dict[str, str],
                environ: Mapping[str, str], notes: list[str]) -> str | None:
    """Multi-node: the interface that reaches node 0 for gloo/NCCL (set in `env`), and
    with c10d this node's address on that route (torchrun --local-addr)."""
    if not checked.multi_node:
        return None
    target = checked.endpoint.rpartition(":")[0] if checked.endpoint else master_addr
    local = _pick_interface(target, env, environ, notes)
    if not checked.endpoint:
        return None  # static: workers meet at --master-addr
    if local:
        notes.append(f"this node's address for the other nodes: {local} "
                     "(torchrun --local-addr)")
    return local


def _pick_interface(host: str, env: dict[str, str], environ: Mapping[str, str],
                    notes: list[str]) -> str | None:
    """gloo and NCCL advertise the address the hostname resolves to, often a loopback
    address (then the job hangs at init): use the interface whose route reaches `host`,
    unless the user chose one. Returns this node's address on that route (None when it
    is loopback or unknown): with c10d, torchrun tells the other nodes to meet node 0 at
    its hostname unless given --local-addr, the same trap."""
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        return None
    name, source = netinfo.route(ip)
    if source is None:
        raise LaunchError(f"no route from this node to {host}" + (
            f" ({ip})" if ip != host else ""), "check the address of node 0 (--master-addr / "
            "--rdzv-endpoint) and this node's network (`ip route get ADDRESS` shows the "
            "way out)")
    if name is None or name.startswith("lo"):
        return None
    wanted = [v for v in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
              if v not in env and v not in environ]
    for var in wanted:
        env[var] = name
    if wanted:
        chosen = " and ".join(f"{v}={name}" for v in wanted)
        notes.append(f"network interface {name} reaches {host}: {chosen}")
    return source


def _shared_store(checked: Checked, env: dict[str, str], environ: Mapping[str, str],
                  notes: list[str]) -> None:
    """torchrun (2.3+) shares the rendezvous store with the workers; a node that joins a
    later round (restarted, or new) then waits for ever for keys node 0 never writes
    again (pytorch#147064). One store per round avoids it."""
    low, high = checked.plan.nnodes
    if not checked.endpoint or not (low != high or checked.max_restarts) or any(
            SHARED_STORE_OFF in m for m in (env, environ)):
        return
    env[SHARED_STORE_OFF] = "1"
    notes.append(f"{SHARED_STORE_OFF}=1: a restarted or new node can rejoin the "
                 "rendezvous (torchrun's shared store blocks later rounds)")


def _hosts_rendezvous(endpoint: str | None, notes: list[str]) -> bool:
    """torchrun decides who hosts the c10d store by the hostname, which often resolves to
    loopback: say so explicitly when the endpoint is one of this node's addresses."""
    if not endpoint:
        return False
    try:
        address = socket.gethostbyname(endpoint.rpartition(":")[0])
    except OSError:
        return False
    is_host = address in {ip for name, ip in netinfo.interfaces().items()
                          if not name.startswith("lo")}
    if is_host:
        notes.append("this node hosts the c10d rendezvous (its address is the endpoint's)")
    return is_host


def _temporary_log_dir() -> str:
    """A fresh folder for the ranks' output (removed after a clean run)."""
    return str(Path(tempfile.gettempdir()) / "distrun-logs" /
               f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
