"""SLURM's two ways of starting a job, told apart, and the rank of a task that is one rank.

- One task per node (distrun's own way, the slurm export's default): `srun
  --ntasks-per-node=1 distrun launch --nproc-per-node K ...`; each distrun starts its
  node's K processes (cluster.py reads the node's rank and the master).
- One task per rank, "one task per GPU" (pyxis/enroot jobs, submitit's tasks_per_node):
  `srun --ntasks-per-node=K distrun launch ...`; SLURM starts K distruns per node, and
  each runs the script once, as the rank SLURM gave it: RANK = SLURM_PROCID, LOCAL_RANK =
  SLURM_LOCALID, WORLD_SIZE = the step's tasks, MASTER_ADDR = the first host of the step's
  nodes (where SLURM puts task 0), MASTER_PORT = the one given, else one derived from the
  job id (every task derives the same).

How they are told apart: `--slurm-tasks per-node|per-gpu` says it. Left out, a job step
that runs more tasks than nodes (SLURM_STEP_NUM_TASKS > SLURM_STEP_NUM_NODES) is one
task per rank: one distrun per node would have started the node's processes K times over,
all with the same node rank, a job that cannot work. A batch script itself (no step, no
SLURM_STEP_* variables) is never a task per rank, whatever `--ntasks` it asked for.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from distrun.errors import LaunchError
from distrun.launch.cluster import env_int as _int
from distrun.launch.cluster import expand_nodelist
from distrun.launch.spec import LaunchRequest, TaskRank
from distrun.launch_rules import SLURM_TASKS

PER_NODE, PER_GPU = SLURM_TASKS
PORT_BASE, PORT_SPAN = 20000, 9000  # derived ports: 20000..28999, below the 29xxx defaults
SRUN_HINT = "srun --ntasks-per-node=K distrun launch --slurm-tasks per-gpu SCRIPT"


@dataclass(frozen=True)
class Found:
    """What the task's environment says: its rank, the step's nodes, the master."""

    job_id: str
    task: TaskRank
    nnodes: int
    node_rank: int
    master_addr: str | None
    master_port: int
    why: str  # how the convention was told


def derived_port(job_id: str) -> int:
    """The master port of a job whose port is not given: the same for every task of the
    job, and (mostly) different for jobs that share a node."""
    number = int(job_id) if job_id.isdigit() else sum(job_id.encode())
    return PORT_BASE + number % PORT_SPAN


def tasks_per_node(text: str) -> list[int]:
    """SLURM's compressed count of tasks per node: `2(x3),1` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            return []
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def detect(environ: Mapping[str, str], mode: str | None) -> Found | None:
    """The task's rank when this distrun is one task per rank (said by `mode`, or told by
    the step), else None. `per-gpu` outside a SLURM task is a LaunchError."""
    if mode == PER_NODE:
        return None
    tasks = _int(environ, "SLURM_STEP_NUM_TASKS")
    nodes = _int(environ, "SLURM_STEP_NUM_NODES")
    if mode is None:
        if tasks is None or nodes is None or tasks <= nodes or "SLURM_PROCID" not in environ:
            return None
        why = f"the step runs {tasks} tasks on {nodes} node{'s' if nodes > 1 else ''}"
    else:
        why = "--slurm-tasks per-gpu"
        tasks = tasks or _int(environ, "SLURM_NTASKS")
        nodes = nodes or _int(environ, "SLURM_NNODES", "SLURM_JOB_NUM_NODES") or 1
    rank, local = _int(environ, "SLURM_PROCID"), _int(environ, "SLURM_LOCALID")
    job_id = environ.get("SLURM_JOB_ID", "")
    if rank is None or local is None or tasks is None or not job_id:
        raise LaunchError("--slurm-tasks per-gpu: this is not a SLURM task (no SLURM_PROCID, "
                          "SLURM_LOCALID and SLURM_NTASKS here)",
                          f"start it once per rank with srun: {SRUN_HINT}")
    node_rank = _int(environ, "SLURM_NODEID") or 0
    per_node = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE")
                              or environ.get("SLURM_TASKS_PER_NODE", ""))
    local_world = per_node[node_rank] if node_rank < len(per_node) else max(
        local + 1, tasks // nodes)
    hosts = expand_nodelist(environ.get("SLURM_STEP_NODELIST") or environ.get(
        "SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", ""))
    return Found(job_id=job_id, task=TaskRank(rank, local, tasks, local_world), nnodes=nodes,
                 node_rank=node_rank, master_addr=hosts[0] if hosts else None,
                 master_port=derived_port(job_id), why=why)


def fill(req: LaunchRequest, found: Found, environ: Mapping[str, str]
         ) -> tuple[LaunchRequest, list[str]]:
    """`req` as the one rank of `found`: the step's values where the user gave none, and a
    LaunchError for what contradicts one rank per task. The notes say what came from where."""
    _refuse_contradictions(req, found)
    task = found.task
    port = "given" if req.master_port is not None else "from the job id"
    filled = dataclasses.replace(
        req, task=task, nnodes=str(found.nnodes), node_rank=found.node_rank,
        nproc_per_node="1", master_addr=req.master_addr or found.master_addr,
        master_port=req.master_port if req.master_port is not None else found.master_port)
    notes = [f"from the SLURM job {found.job_id}, one rank per task ({found.why}): rank "
             f"{task.rank} of {task.world_size}, local rank {task.local_rank} of "
             f"{task.local_world_size} on node {found.node_rank}, master "
             f"{filled.master_addr}:{filled.master_port} (port {port})"]
    if req.launcher not in (None, "torchrun"):
        notes.append(f"launcher {req.launcher}: not used; SLURM started this rank, and the "
                     "script runs in this task with RANK, LOCAL_RANK, WORLD_SIZE, "
                     "MASTER_ADDR and MASTER_PORT set")
    notes += _gpu_note(task, environ)
    return filled, notes


def _refuse_contradictions(req: LaunchRequest, found: Found) -> None:
    """What a run of one rank per task cannot do, or values that say another job."""
    def named(key: str, flag: str) -> str:
        where = req.origin.get(key)
        return f"{where}: {key}" if where else flag

    hint = ("leave it out (SLURM says it), or start one task per node: srun "
            "--ntasks-per-node=1 distrun launch --slurm-tasks per-node ...")
    if req.rdzv_endpoint or req.rdzv_backend == "c10d":
        raise LaunchError(f"{named('rdzv.endpoint', '--rdzv-endpoint')}: one rank per SLURM "
                          "task has no rendezvous (the ranks meet at MASTER_ADDR:MASTER_PORT)",
                          hint)
    if req.max_restarts:
        raise LaunchError(f"{named('max_restarts', '--max-restarts')} {req.max_restarts}: one "
                          "rank per SLURM task cannot be restarted alone (the other ranks "
                          "are other tasks)", hint)
    if req.nnodes is not None and req.nnodes != str(found.nnodes):
        raise LaunchError(f"{named('nnodes', '--nnodes')} {req.nnodes}: the SLURM step runs "
                          f"on {found.nnodes} node(s)", hint)
    if req.node_rank is not None and req.node_rank != found.node_rank:
        raise LaunchError(f"{named('node_rank', '--node-rank')} {req.node_rank}: this task "
                          f"is on node {found.node_rank} of the step", hint)
    nproc = req.nproc_per_node
    if nproc is not None and nproc.isdigit() and int(nproc) not in (
            1, found.task.local_world_size):
        raise LaunchError(f"{named('nproc_per_node', '--nproc-per-node')} {nproc}: SLURM runs "
                          f"{found.task.local_world_size} task(s) on this node, one rank each",
                          hint)


def _gpu_note(task: TaskRank, environ: Mapping[str, str]) -> list[str]:
    """SLURM may give each task its own GPUs (--gpus-per-task, --gpu-bind): the task then
    sees its GPU as cuda:0, and a script that picks cuda:LOCAL_RANK finds none."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return []
    count = len([d for d in visible.split(",") if d.strip()])
    if task.local_rank < count:
        return []
    return [f"warning: this task sees {count} GPU(s) (CUDA_VISIBLE_DEVICES={visible}): a "
            f"script that uses GPU LOCAL_RANK ({task.local_rank}) finds none; ask SLURM for "
            "GPUs per node (--gpus-per-node), not per task (--gpus-per-task, --gpu-bind)"]
