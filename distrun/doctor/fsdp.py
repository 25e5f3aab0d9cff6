"""FSDP2: does this torch have `torch.distributed.fsdp.fully_shard` (what `distrun convert
--to fsdp` writes)? Asked in doctor's own process, where the torch check has loaded
torch and torch.distributed already (a child process would import torch again: seconds)."""

from __future__ import annotations

from collections.abc import Iterator

from distrun.doctor.check import CheckResult, Context, installed_version


def check_fsdp2(ctx: Context) -> Iterator[CheckResult]:
    version = installed_version("torch")
    if version is None:
        yield CheckResult("fsdp2", "skip", "torch is not installed")
        return
    try:
        import torch
        from torch.distributed.checkpoint.state_dict import get_model_state_dict  # noqa: F401
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except Exception as err:  # noqa: BLE001 (an import of a broken install: any error)
        last = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        yield CheckResult("fsdp2", "warn", f"torch {version} has no FSDP2 fully_shard ({last})",
                          "only needed for `convert --to fsdp`: install torch 2.6 or newer")
        return
    yield CheckResult("fsdp2", "ok", f"torch {torch.__version__} has FSDP2 "
                      "(torch.distributed.fsdp.fully_shard): `distrun convert --to fsdp` "
                      "scripts run here")


CHECKS = [check_fsdp2]
