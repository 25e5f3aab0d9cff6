"""ray backend: `python -m distrun.launch.ray_driver ...`, the Ray driver of the job.

The driver starts a local Ray cluster (stopped at its end) or joins the one at
`--address`, runs the job's ranks as the workers of a Ray Train `TorchTrainer`, and
writes each rank's output lines tagged `[default<RANK>]:` as the runner reads them (one
driver supervises every rank of the job, so the tag is the global rank). What the
workers run: the script, unchanged (ray_worker.py).

The driver's environment sets how Ray forwards the workers' output (every line, not
deduplicated, printed by `print` as the script wrote it, not through Ray Train's
logger, without colour), and keeps each worker in the folder it starts in (a local
cluster's: the driver's; a Ray job's: its working_dir), not in Ray Train's own. The
names of the variables meant for the workers are passed in DISTRUN_RAY_ENV: on a
cluster of other machines the workers do not inherit the driver's environment, so the
driver gives them these (and every DISTRUN_* variable).
"""

from __future__ import annotations

import sys

from distrun.launch.backends.common import job_env, target
from distrun.launch.spec import Command, LaunchSpec

# Ray's settings for the job, read by Ray in the driver (and passed on to its workers).
RAY_ENV = {
    "RAY_DEDUP_LOGS": "0",  # every rank's line, even when the ranks print the same
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",  # print() writes to stdout, not to a logger
    "RAY_COLOR_PREFIX": "0",
    "RAY_CHDIR_TO_TRIAL_DIR": "0",  # relative paths as under torchrun
}


def workers(spec: LaunchSpec) -> int:
    """Ray Train workers: the processes of every node of the job."""
    nproc = spec.nproc_per_node if isinstance(spec.nproc_per_node, int) else 1
    return nproc * spec.max_nodes


def build(spec: LaunchSpec) -> Command:
    argv = [sys.executable, "-u", "-m", "distrun.launch.ray_driver",
            f"--workers={workers(spec)}"]
    if spec.ray_address:
        argv.append(f"--address={spec.ray_address}")
    if spec.log_dir:
        argv.append(f"--log-dir={spec.log_dir}")
    argv += ["--", *target(spec)]
    env = job_env(spec)
    env["DISTRUN_RAY_ENV"] = ",".join(sorted(env))
    env.update(RAY_ENV)
    return Command(argv=argv, env=env)
