"""One rank that SLURM started (one task per GPU: `spec.task`, see slurm_tasks.py): no
launcher between distrun and the script, which runs once in this task as that rank.

The script starts through `distrun.launch.rankrun`, as DeepSpeed's workers do: its lines
come tagged `[default<LOCAL_RANK>]:` (the runner shows them as this rank's), its standard
error is kept in the log folder (LOG_DIR/slurm-task/attempt_0/<LOCAL_RANK>/), and how it
ended is recorded beside it (exit.json: the runner names the rank from it). The
environment is the one torchrun gives a worker: RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the user's --env cannot change them).
"""

from __future__ import annotations

import sys

from distrun.launch.backends.common import job_env, target
from distrun.launch.spec import Command, LaunchSpec

FOLDER = "slurm-task"


def build(spec: LaunchSpec) -> Command:
    task = spec.task
    if task is None:
        raise ValueError("the task backend runs one SLURM task's rank: spec.task is not set")
    argv = [sys.executable, "-u", "-m", "distrun.launch.rankrun", f"--folder={FOLDER}"]
    if spec.log_dir:
        argv.append(f"--log-dir={spec.log_dir}")
    env = {**job_env(spec), "RANK": str(task.rank), "LOCAL_RANK": str(task.local_rank),
           "WORLD_SIZE": str(task.world_size), "LOCAL_WORLD_SIZE": str(task.local_world_size),
           "MASTER_ADDR": spec.master_addr, "MASTER_PORT": str(spec.master_port)}
    return Command(argv=[*argv, "--", *target(spec)], env=env)
