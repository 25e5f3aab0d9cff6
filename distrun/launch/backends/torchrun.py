"""torchrun backend: `python -m torch.distributed.run ...` with the interpreter distrun runs
under, so the user's environment (venv, conda) is the one that runs the job."""

from __future__ import annotations

import sys

from distrun.launch.spec import Command, LaunchSpec


def build(spec: LaunchSpec) -> Command:
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--nnodes={spec.nnodes}",
        f"--node-rank={spec.node_rank}",
        f"--master-addr={spec.master_addr}",
        f"--master-port={spec.master_port}",
        spec.script,
        *spec.script_args,
    ]
    return Command(argv=argv, env=dict(spec.env))
