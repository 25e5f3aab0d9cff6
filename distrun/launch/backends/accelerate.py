"""accelerate backend: `python -m accelerate.commands.launch ...`, the same job as the
torchrun backend in accelerate's terms: `--num_processes` is the total over all
machines, `--multi_gpu` whenever there is more than one process (accelerate then
starts torchrun, which also works on CPU with gloo). On a node without GPUs the workers
get ACCELERATE_USE_CPU=true: without it, an `Accelerator()` there finds no GPU and makes
each process a world of its own (accelerate's own `--cpu` would start one process)."""

from __future__ import annotations

import sys

from distrun.errors import LaunchError
from distrun.launch.backends.common import job_env, rdzv_conf, target
from distrun.launch.spec import Command, LaunchSpec


def build(spec: LaunchSpec) -> Command:
    if not isinstance(spec.nproc_per_node, int):
        raise LaunchError(f"accelerate needs a number of processes per node, not "
                          f"{spec.nproc_per_node!r}", "set nproc_per_node to a number")
    total = spec.nproc_per_node * spec.max_nodes
    argv = [sys.executable, "-m", "accelerate.commands.launch",
            f"--num_processes={total}", f"--num_machines={spec.max_nodes}",
            f"--mixed_precision={spec.mixed_precision}", "--dynamo_backend=no"]
    if total > 1:
        argv.append("--multi_gpu")
    if spec.max_nodes > 1:
        argv.append(f"--machine_rank={spec.node_rank}")
    if spec.rdzv_backend == "static":
        argv += [f"--main_process_ip={spec.master_addr}",
                 f"--main_process_port={spec.master_port}"]
        if spec.max_nodes > 1:
            argv.append("--same_network")
    else:
        host, _, port = (spec.rdzv_endpoint or "").rpartition(":")
        argv += [f"--rdzv_backend={spec.rdzv_backend}", f"--main_process_ip={host}",
                 f"--main_process_port={port}"]
        if conf := rdzv_conf(spec):
            argv.append(f"--rdzv_conf={conf}")
    argv.append(f"--max_restarts={spec.max_restarts}")
    if spec.log_dir:
        argv += [f"--log_dir={spec.log_dir}", "--tee=3"]
    argv += target(spec)
    env = job_env(spec)
    if spec.local_addr:  # accelerate has no flag for it; torchrun reads it from PET_LOCAL_ADDR
        env["PET_LOCAL_ADDR"] = spec.local_addr
    if spec.cpu and total > 1:
        env.setdefault("ACCELERATE_USE_CPU", "true")
    return Command(argv=argv, env=env)
