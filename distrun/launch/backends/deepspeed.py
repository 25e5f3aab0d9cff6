"""deepspeed backend: DeepSpeed's per-node launcher, `python -m deepspeed.launcher.launch`,
the program the `deepspeed` command runs on each node (over ssh or pdsh). distrun is
itself the per-node launcher, so it starts that module directly: the job is described
by `--world_info` (every node and its process slots), node 0's address and port, and
this node's rank. There is no rendezvous: each node is started with its --node-rank.

Each worker starts through `distrun.launch.rankrun`, which gives its output lines the
`[default<local rank>]:` tags the runner reads, keeps its standard error in the log
folder and records how it ended (DeepSpeed's launcher prints no failure table). With
`--no_local_rank` nothing is appended to the script's arguments: the script reads
LOCAL_RANK from the environment, as under torchrun.
"""

from __future__ import annotations

import base64
import json
import sys

from distrun.errors import LaunchError
from distrun.launch.backends.common import job_env, target
from distrun.launch.spec import Command, LaunchSpec


def world_info(nproc_per_node: int, nnodes: int) -> str:
    """DeepSpeed's --world_info: {node name: [slot, ...]} as url-safe base64 JSON."""
    info = {f"node{i}": list(range(nproc_per_node)) for i in range(nnodes)}
    return base64.urlsafe_b64encode(json.dumps(info).encode()).decode()


def build(spec: LaunchSpec) -> Command:
    if not isinstance(spec.nproc_per_node, int):
        raise LaunchError(f"the deepspeed launcher needs a number of processes per node, not "
                          f"{spec.nproc_per_node!r}", "set nproc_per_node to a number")
    argv = [sys.executable, "-u", "-m", "deepspeed.launcher.launch",
            f"--world_info={world_info(spec.nproc_per_node, spec.max_nodes)}",
            f"--node_rank={spec.node_rank}", f"--master_addr={spec.master_addr}",
            f"--master_port={spec.master_port}", "--no_local_rank", "--log_level=warning",
            "--module", "distrun.launch.rankrun"]
    if spec.log_dir:
        argv.append(f"--log-dir={spec.log_dir}")
    argv += ["--", *target(spec)]
    return Command(argv=argv, env=job_env(spec))
