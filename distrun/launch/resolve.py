"""From what the user typed (and what the cluster says) to a checked LaunchSpec.

Every mistake is refused here, before anything starts: exit code 2 and what to change.
Order of precedence: command-line flags, then the config file (merged by the caller
into the request), then the cluster environment (SLURM, Kubeflow PyTorchJob), then
the defaults below.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from distrun.config.schema import KEYS, NPROC_WORDS
from distrun.errors import LaunchError
from distrun.launch import cluster
from distrun.launch.spec import LaunchRequest, LaunchSpec

LAUNCHERS = KEYS["launcher"].choices
MIXED_PRECISION = KEYS["mixed_precision"].choices
DEFAULT_MASTER_PORT = 29500
DEFAULT_RDZV_PORT = 29400
T = TypeVar("T")

SHARED_STORE_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

def resolve(req: LaunchRequest, environ: Mapping[str, str] | None = None) -> LaunchSpec:
    environ = os.environ if environ is None else environ
    notes: list[str] = []
    launcher = req.launcher or KEYS["launcher"].default
    if launcher not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {launcher!r}", f"use one of: {', '.join(LAUNCHERS)}")
    if launcher == "accelerate" and importlib.util.find_spec("accelerate") is None:
        raise LaunchError("--launcher accelerate: accelerate is not installed here",
                          "pip install accelerate (or distrun[accelerate]), or use torchrun")
    script = _script(req)
    found = cluster.detect(environ) if req.rdzv_endpoint is None else None
    seen = found or cluster.Detected(source="")
    nnodes_text = _fill(req.nnodes, seen.nnodes, "nnodes", notes)
    node_rank = _fill(req.node_rank, seen.node_rank, "node_rank", notes)
    master_addr = _fill(req.master_addr, seen.master_addr, "master_addr", notes)
    master_port = _fill(req.master_port, seen.master_port, "master_port", notes)
    nproc_text = _fill(req.nproc_per_node, seen.nproc_per_node, "nproc_per_node", notes)
    if found is not None and notes:
        notes[:] = [f"from the {found.source}: {', '.join(notes)}"]
    if nnodes_text is not None:
        nnodes_text = str(nnodes_text)
    nproc = _nproc(str(nproc_text or KEYS["nproc_per_node"].default), notes)
    min_nodes, max_nodes = _nnodes(str(nnodes_text or KEYS["nnodes"].default))
    rdzv_backend = req.rdzv_backend or ("c10d" if req.rdzv_endpoint else
                                        KEYS["rdzv"].keys["backend"].default)
    if rdzv_backend not in ("static", "c10d", "etcd", "etcd-v2"):
        raise LaunchError(f"unknown rendezvous backend {rdzv_backend!r}", "use static or c10d")
    if min_nodes != max_nodes and rdzv_backend == "static":
        raise LaunchError(f"--nnodes {nnodes_text} (elastic) needs a rendezvous backend",
                          "add --rdzv-endpoint HOST:PORT (the c10d backend)")
    if rdzv_backend != "static" and not req.rdzv_endpoint:
        raise LaunchError(f"--rdzv-backend {rdzv_backend} needs --rdzv-endpoint HOST:PORT")
    if launcher == "accelerate" and min_nodes != max_nodes:
        raise LaunchError("accelerate cannot run an elastic job (--nnodes MIN:MAX)",
                          "use --launcher torchrun, or a fixed --nnodes")
    multi = max_nodes > 1
    if node_rank is None:
        node_rank = 0
    if rdzv_backend == "static" and not 0 <= node_rank < max_nodes:
        raise LaunchError(f"--node-rank {node_rank} is outside 0..{max_nodes - 1}",
                          f"with --nnodes {max_nodes} each node gets a rank from 0 to "
                          f"{max_nodes - 1}")
    if multi and rdzv_backend == "static" and not master_addr:
        raise LaunchError("a multi-node job needs the address of node 0",
                          "add --master-addr HOST (node 0's address, the same on every node), "
                          "or --rdzv-endpoint HOST:PORT on every node")
    master_addr = master_addr or "127.0.0.1"
    _check_host("--master-addr", master_addr)
    if master_port is not None and not 1 <= master_port <= 65535:
        raise LaunchError(f"--master-port {master_port} is outside 1..65535")
    if master_port is None:
        if multi:
            master_port = DEFAULT_MASTER_PORT
        else:
            master_port = free_port()
            notes.append(f"master port {master_port} chosen (free on this machine)")
    elif not multi or node_rank == 0:
        _check_port_free(master_addr if multi else "127.0.0.1", master_port)
    endpoint = _endpoint(req.rdzv_endpoint) if req.rdzv_endpoint else None
    mixed = req.mixed_precision or KEYS["mixed_precision"].default
    if mixed not in MIXED_PRECISION:
        raise LaunchError(f"--mixed-precision {mixed!r} is not one of {', '.join(MIXED_PRECISION)}")
    if req.max_restarts is not None and req.max_restarts < 0:
        raise LaunchError("--max-restarts must be 0 or more")
    if req.timeout is not None and req.timeout <= 0:
        raise LaunchError("--timeout must be a positive number of seconds")
    for key in req.env:
        if not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise LaunchError(f"--env {key!r}: not a valid environment variable name")
    env = dict(req.env)
    local_addr = None
    if max_nodes > 1:
        local_addr = _pick_interface(endpoint.rpartition(":")[0] if endpoint else master_addr,
                                     env, environ, notes)
    if not endpoint:
        local_addr = None  # static: workers meet at --master-addr; c10d: at node 0's address
    elif local_addr:
        notes.append(f"this node's address for the other nodes: {local_addr} "
                     "(torchrun --local-addr)")
    for key, value in req.rdzv_conf.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", key) or not re.fullmatch(r"[^,=\s]+", value):
            raise LaunchError(f"--rdzv-conf {key}={value}: expected NAME=VALUE with a plain "
                              "value", "for example --rdzv-conf join_timeout=900")
    if req.rdzv_conf and not endpoint:
        raise LaunchError("--rdzv-conf applies to the c10d rendezvous",
                          "add --rdzv-endpoint HOST:PORT")
    restarts = req.max_restarts or KEYS["max_restarts"].default
    if endpoint and (min_nodes != max_nodes or restarts) and not any(
            SHARED_STORE_OFF in m for m in (env, environ)):
        # torchrun (2.3+) shares the rendezvous store with the workers; a node that joins a
        # later round (restarted, or new) then waits for ever for keys node 0 never writes
        # again (pytorch#147064). One store per round avoids it.
        env[SHARED_STORE_OFF] = "1"
        notes.append(f"{SHARED_STORE_OFF}=1: a restarted or new node can rejoin the "
                     "rendezvous (torchrun's shared store blocks later rounds)")
    is_host = False
    if endpoint:
        # torchrun decides who hosts the c10d store by the hostname, which often resolves
        # to loopback: say so explicitly when the endpoint is one of this node's addresses.
        from distrun.netinfo import interfaces

        try:
            is_host = socket.gethostbyname(endpoint.rpartition(":")[0]) in {
                ip for name, ip in interfaces().items() if not name.startswith("lo")}
        except OSError:
            is_host = False
        if is_host:
            notes.append("this node hosts the c10d rendezvous (its address is the endpoint's)")
    log_dir = req.log_dir or str(
        Path(tempfile.gettempdir()) / "distrun-logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-"
        f"{os.getpid()}")
    return LaunchSpec(
        script=script, script_args=tuple(req.script_args), module=req.module,
        nproc_per_node=nproc, min_nodes=min_nodes, max_nodes=max_nodes, node_rank=node_rank,
        master_addr=master_addr, master_port=master_port, rdzv_backend=rdzv_backend,
        rdzv_endpoint=endpoint, rdzv_is_host=is_host, local_addr=local_addr,
        rdzv_conf=tuple(sorted(req.rdzv_conf.items())),
        rdzv_id=req.rdzv_id or KEYS["rdzv"].keys["id"].default,
        max_restarts=restarts, log_dir=log_dir,
        launcher=launcher,
        mixed_precision=mixed, env=tuple(sorted(env.items())), timeout=req.timeout,
        notes=tuple(notes), keep_logs=req.log_dir is not None,
    )


def _fill(given: T | None, detected: T | None, name: str, filled: list[str]) -> T | None:
    """A value given by the user wins; else the cluster's (noted in `filled`)."""
    if given is not None or detected is None:
        return given
    filled.append(f"{name}={detected}")
    return detected


def _script(req: LaunchRequest) -> str:
    if not req.script:
        raise LaunchError("no script given", "distrun launch [OPTIONS] SCRIPT [ARGS...]")
    if req.module:
        return req.script
    path = Path(req.script)
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError as err:  # a name longer than the file system allows
        raise LaunchError(f"{req.script[:80]!r}: {err.strerror}") from None
    if not is_file:
        what = "is a directory" if is_dir else "no such file"
        raise LaunchError(f"{req.script}: {what}", "give the path of the Python script to run "
                          "(or -m MODULE for a module)")
    return req.script


def _nproc(text: str, notes: list[str]) -> int:
    if text.isdigit():
        value = int(text)
        if value < 1:
            raise LaunchError("--nproc-per-node must be at least 1")
        return value
    if text not in NPROC_WORDS:
        raise LaunchError(f"--nproc-per-node {text!r}: give a number, or auto, gpu or cpu")
    if text == "cpu":
        count = os.cpu_count() or 1
        notes.append(f"--nproc-per-node cpu: {count} processes (one per CPU core)")
        return count
    import torch  # only here: counting GPUs needs it

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if text == "gpu" and gpus == 0:
        raise LaunchError("--nproc-per-node gpu: no CUDA GPU is visible here",
                          "use a number, or auto (1 process on a CPU-only machine)")
    count = gpus or 1
    notes.append(f"--nproc-per-node {text}: {count} process(es) "
                 f"({gpus} GPU(s) visible{'' if gpus else '; 1 on a CPU-only machine'})")
    return count


def _nnodes(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not lo.isdigit() or (sep and not hi.isdigit()):
        raise LaunchError(f"--nnodes {text!r}: give N or MIN:MAX (for example 2, or 1:4)")
    low, high = int(lo), int(hi) if sep else int(lo)
    if low < 1 or high < low:
        raise LaunchError(f"--nnodes {text!r}: need 1 <= MIN <= MAX")
    return low, high


def _endpoint(text: str) -> str:
    host, sep, port = text.rpartition(":")
    _check_host("--rdzv-endpoint", host if sep else text)
    if not sep:
        return f"{text}:{DEFAULT_RDZV_PORT}"
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise LaunchError(f"--rdzv-endpoint {text!r}: give HOST:PORT with a port in 1..65535")
    return text


def _check_host(flag: str, host: str) -> None:
    """Refuse a name no resolver takes (an empty label, one over 63 characters): looking it
    up fails with a codec error, not an answer."""
    try:
        host.encode("idna")
    except UnicodeError:
        raise LaunchError(f"{flag} {host[:80]!r}: not a valid host name or address") from None


def _pick_interface(host: str, env: dict[str, str], environ: Mapping[str, str],
                    notes: list[str]) -> str | None:
    """Multi-node: gloo and NCCL advertise the address the hostname resolves to, often a
    loopback address (then the job hangs at init). Use the interface whose route reaches
    the master, unless the user chose one. Returns this node's address on that route
    (None when it is loopback or unknown): with c10d, torchrun tells the other nodes to
    meet node 0 at its hostname unless given --local-addr, the same trap."""
    from distrun.netinfo import route

    try:
        ip = socket.gethostbyname(host)
    except OSError:
        return None
    name, source = route(ip)
    if source is None:
        raise LaunchError(f"no route from this node to {host}" + (f" ({ip})" if ip != host
                                                                  else ""),
                          "check the address of node 0 (--master-addr / --rdzv-endpoint) and "
                          "this node's network (`ip route get ADDRESS` shows the way out)")
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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host if host not in ("localhost",) else "127.0.0.1", port))
        except OSError as err:
            if err.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
                raise LaunchError(f"master port {port} is already in use on this machine",
                                  "leave --master-port out (a free port is chosen) or pick "
                                  "another") from None
            # an address not on this machine: nothing to check here
