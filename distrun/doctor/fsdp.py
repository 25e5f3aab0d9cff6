"""FSDP2: does this torch have `torch.distributed.fsdp.fully_shard` (what `distrun convert
--to fsdp` writes)? Asked in a child process: importing torch.distributed here would load
torch into distrun itself."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

from distrun.doctor.check import CheckResult, Context, installed_version

_PROBE = ("import torch\n"
          "from torch.distributed.fsdp import fully_shard\n"
          "from torch.distributed.checkpoint.state_dict import get_model_state_dict\n"
          "print(torch.__version__)\n")


def check_fsdp2(ctx: Context) -> Iterator[CheckResult]:
    version = installed_version("torch")
    if version is None:
        yield CheckResult("fsdp2", "skip", "torch is not installed")
        return
    try:
        run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                             timeout=120, env=dict(ctx.environ))
    except (OSError, subprocess.SubprocessError) as err:
        yield CheckResult("fsdp2", "warn", f"could not ask torch: {err}")
        return
    if run.returncode == 0:
        yield CheckResult("fsdp2", "ok", f"torch {version} has FSDP2 "
                          "(torch.distributed.fsdp.fully_shard): `distrun convert --to fsdp` "
                          "scripts run here")
        return
    last = (run.stderr.strip().splitlines() or ["?"])[-1]
    yield CheckResult("fsdp2", "warn", f"torch {version} has no FSDP2 fully_shard ({last})",
                      "only needed for `convert --to fsdp`: install torch 2.6 or newer")


CHECKS = [check_fsdp2]
