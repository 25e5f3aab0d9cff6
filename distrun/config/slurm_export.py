"""The SLURM export (`config export --format slurm`): an sbatch script whose srun line
starts `distrun launch` once per node, or once per rank, optionally in a container.

- `slurm.tasks: per-node` (the default): `--ntasks-per-node=1`; each node's distrun starts
  its processes (torchrun) and reads its node rank and the master from SLURM.
- `slurm.tasks: per-gpu`: `--ntasks-per-node=<nproc_per_node>` and `distrun launch
  --slurm-tasks per-gpu`; SLURM starts one distrun per rank, and each runs its script once
  as that rank (distrun/launch/slurm_tasks.py): the convention of pyxis/enroot jobs and of
  submitit.
- `slurm.container_image` (with `container_mounts`, `container_workdir`): the srun line
  gets pyxis's `--container-image`, `--container-mounts`, `--container-workdir`; distrun
  then runs inside the container, whose image must have it. The `setup` lines run in the
  batch script, outside the container.

exports.py gives the `distrun launch` options every export shares (its `_launch_args`)
and the script to run; this module writes the rest. `check` says, at `config validate`,
what the export would refuse. A value with `$` in a container option is written in double
quotes, so that `$SLURM_SUBMIT_DIR`, `$HOME`... expand when the batch script runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any, Literal

from distrun import launch_rules as rules
from distrun.config.records import Config
from distrun.errors import InputError
from distrun.launch_rules import DEFAULT_RDZV_PORT, Verdict

Add = Callable[[str, str, Literal["error", "warning"]], None]
NEEDS_IMAGE = ("container_mounts", "container_workdir")
PER_NODE_ABOUT = """\
# Node 0 of the allocation hosts the rendezvous. Nothing node-specific is computed here
# (this script runs on node 0 only): on every node, `distrun launch` reads its own rank
# (SLURM_NODEID), the node count and the master address from SLURM's variables."""
PER_GPU_ABOUT = """\
# One task per rank (per GPU): srun starts @@tasks@@ `distrun launch` per node, and each runs
# the script once as the rank SLURM gave its task (RANK=SLURM_PROCID, LOCAL_RANK=
# SLURM_LOCALID, WORLD_SIZE=SLURM_NTASKS); the ranks meet at rank 0, on the first node."""
CONTAINER_ABOUT = """
# srun runs distrun in a container (pyxis): the image needs distrun and the job's Python
# packages; the set-up lines above ran outside it, in this script on the first node."""


def _nodes(nnodes: Any) -> tuple[int, int]:
    found = rules.node_range(nnodes)
    return (1, 1) if isinstance(found, Verdict) else found


def per_gpu_conflicts(v: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for each value a one-task-per-rank job cannot take."""
    if v["slurm"]["tasks"] != "per-gpu":
        return []
    why = "slurm.tasks is per-gpu (one rank per SLURM task)"
    found = []
    low, high = _nodes(v["nnodes"])
    if low != high:
        found.append(("nnodes", f"{why}: nnodes {v['nnodes']} is elastic, but SLURM starts a "
                      "fixed number of tasks; give a number"))
    if v["max_restarts"]:
        found.append(("max_restarts", f"{why}: a rank cannot be restarted alone (the others "
                      "are other tasks); set max_restarts: 0, or use tasks: per-node"))
    if v["rdzv"]["endpoint"]:
        found.append(("rdzv.endpoint", f"{why}: there is no rendezvous (the ranks meet at "
                      "the first node, MASTER_PORT); remove rdzv.endpoint"))
    if _tasks_per_node(v) is None:
        found.append(("nproc_per_node", f"{why}: nproc_per_node {v['nproc_per_node']!r} "
                      "is counted on the node when the job runs, but sbatch needs the "
                      "tasks per node beforehand; give a number, or set slurm.gpus_per_node"))
    return found


def check(v: dict[str, Any], add: Add) -> None:
    """The `slurm:` section across keys, for `config validate`: container options need an
    image (error); what a per-gpu export would refuse (warning: the file still runs with
    `distrun launch --config`)."""
    s = v["slurm"]
    for key in NEEDS_IMAGE:
        if s[key] and not s["container_image"]:
            add(f"slurm.{key}", f"slurm.{key} applies to a container: set "
                "slurm.container_image too (pyxis runs the job in that image)", "error")
    for key, why in per_gpu_conflicts(v):
        add(key, f"{why} (the slurm export refuses it)", "warning")


def _tasks_per_node(v: dict[str, Any]) -> int | None:
    nproc = v["nproc_per_node"]
    if isinstance(nproc, int):
        return nproc
    return v["slurm"]["gpus_per_node"] or None


def _where(config: Config, *keys: str) -> str:
    """FILE:LINE of the first of `keys` the file sets (FILE alone if none)."""
    line = next((config.lines[k] for k in keys if k in config.lines), None)
    return f"{config.path}:{line}" if line else config.path


def _refuse(config: Config, v: dict[str, Any]) -> None:
    """The first of the per-gpu conflicts, as an error naming the key and its line."""
    for key, why in per_gpu_conflicts(v):
        raise InputError(f"{_where(config, key, 'slurm.tasks')}: {key}: {why}")
    for key in NEEDS_IMAGE:
        if v["slurm"][key] and not v["slurm"]["container_image"]:
            raise InputError(f"{_where(config, 'slurm.' + key)}: slurm.{key} without "
                             "slurm.container_image", "set the image the job runs in")


def _without_nproc(args: list[str]) -> list[str]:
    """The launch options less `--nproc-per-node N` (the tasks per node say it)."""
    at = args.index("--nproc-per-node") if "--nproc-per-node" in args else len(args)
    return [*args[:at], *args[at + 2:]]


def _shell_word(value: str) -> str:
    """`value` as one shell word: quoted, except that `$NAME` and `${NAME}` expand."""
    if "$" not in value:
        return shlex.quote(value)
    return '"' + re.sub(r'(["\\`])', r"\\\1", value) + '"'


def container_options(s: dict[str, Any]) -> list[str]:
    """pyxis's srun options for the `slurm:` section (none without an image)."""
    if not s["container_image"]:
        return []
    options = [f"--container-image={_shell_word(s['container_image'])}"]
    if s["container_mounts"]:
        options.append(f"--container-mounts={_shell_word(','.join(s['container_mounts']))}")
    if s["container_workdir"]:
        options.append(f"--container-workdir={_shell_word(s['container_workdir'])}")
    return options


def render(config: Config, r: dict[str, Any], launch_args: list[str], target: list[str],
           text: str) -> str:
    """The sbatch script: `text` (templates/slurm.sbatch) filled in. `launch_args`: the
    `distrun launch` options of the file (with `--nproc-per-node N`), `target`: the
    script and its arguments."""
    _refuse(config, r)
    s = r["slurm"]
    low, high = _nodes(r["nnodes"])
    options = []
    for flag, key in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                      ("time", "time"), ("cpus-per-task", "cpus_per_task"), ("mem", "mem"),
                      ("constraint", "constraint"), ("output", "output")):
        if s[key] not in (None, ""):
            options.append(f"#SBATCH --{flag}={s[key]}")
    if s["gpus_per_node"]:
        options.append(f"#SBATCH --gpus-per-node={s['gpus_per_node']}")
    options += [f"#SBATCH {extra}" for extra in s["extra"]]
    launch = ["distrun", "launch", *launch_args]
    tasks, about = 1, PER_NODE_ABOUT
    if s["tasks"] == "per-gpu":
        tasks = _tasks_per_node(r) or 1
        about = PER_GPU_ABOUT.replace("@@tasks@@", str(tasks))
        launch = ["distrun", "launch", "--slurm-tasks", "per-gpu", *_without_nproc(launch_args)]
    rdzv = ""
    if low != high or r["rdzv"]["endpoint"]:
        port = str(r["rdzv"]["endpoint"] or "").rpartition(":")[2] or str(DEFAULT_RDZV_PORT)
        launch += ["--nnodes", f"{low}:{high}" if low != high else str(high),
                   "--rdzv-id", r["rdzv"]["id"] if r["rdzv"]["id"] != "none" else "$SLURM_JOB_ID"]
        rdzv = f' --rdzv-endpoint "${{MASTER_ADDR}}:{port}"'
    command = shlex.join(launch).replace("'$SLURM_JOB_ID'", '"$SLURM_JOB_ID"') + rdzv
    command = " ".join([*container_options(s), command, shlex.join(target)])
    if s["container_image"]:
        about += CONTAINER_ABOUT
    for name, value in {
        "source": config.path, "job_name": s["job_name"],
        "nodes": f"{low}-{high}" if low != high else str(high),
        "tasks_per_node": str(tasks), "about": about,
        "sbatch_options": "\n".join(options), "setup": "\n".join(s["setup"]),
        "command": command,
    }.items():
        text = text.replace(f"@@{name}@@", value)
    return text
