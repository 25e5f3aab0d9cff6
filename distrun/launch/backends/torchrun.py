"""torchrun backend: `python -m torch.distributed.run ...` with the interpreter distrun
runs under, so the user's environment (venv, conda) is the one that runs the job.

Worker output is teed into `--log-dir` (so a failure report can quote the failing
rank's error) and still shown live."""

from __future__ import annotations

import sys

from distrun.launch.backends.common import job_env, rdzv_conf, target
from distrun.launch.spec import Command, LaunchSpec


def build(spec: LaunchSpec) -> Command:
    argv = [sys.executable, "-m", "torch.distributed.run",
            f"--nproc-per-node={spec.nproc_per_node}", f"--nnodes={spec.nnodes}"]
    if spec.rdzv_backend == "static":
        argv += [f"--node-rank={spec.node_rank}", f"--master-addr={spec.master_addr}",
                 f"--master-port={spec.master_port}"]
    else:
        argv += [f"--rdzv-backend={spec.rdzv_backend}", f"--rdzv-endpoint={spec.rdzv_endpoint}",
                 f"--rdzv-id={spec.rdzv_id}"]
        if conf := rdzv_conf(spec):
            argv.append(f"--rdzv-conf={conf}")
        if spec.local_addr:
            argv.append(f"--local-addr={spec.local_addr}")
    argv += [f"--max-restarts={spec.max_restarts}"]
    if spec.log_dir:
        argv += [f"--log-dir={spec.log_dir}", "--redirects=3", "--tee=3"]
    argv += target(spec)
    return Command(argv=argv, env=job_env(spec))
