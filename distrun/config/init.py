"""`distrun config init`: a few questions, with defaults detected on this machine."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import click
import yaml

from distrun.launch_rules import LAUNCHERS, MIXED_PRECISION

ASKED = ("script", "launcher", "nnodes", "nproc_per_node", "master_addr", "mixed_precision")


def gpu_count() -> int:
    """GPUs visible here, from nvidia-smi (no torch import: config commands stay fast)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def detected_defaults() -> dict[str, Any]:
    gpus = gpu_count()
    return {"launcher": "torchrun", "nnodes": 1, "nproc_per_node": gpus or 1,
            "mixed_precision": "bf16" if gpus else "no", "script": None, "master_addr": None}


def ask(values: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    if given.get("script") is None:
        out["script"] = click.prompt("Training script", default=out["script"] or "train.py")
    if given.get("launcher") is None:
        out["launcher"] = click.prompt("Launcher", default=out["launcher"],
                                       type=click.Choice(LAUNCHERS))
    if given.get("nnodes") is None:
        out["nnodes"] = click.prompt("How many machines (nodes)", default=out["nnodes"])
    if given.get("nproc_per_node") is None:
        out["nproc_per_node"] = click.prompt("Processes per machine (one per GPU)",
                                             default=out["nproc_per_node"])
    multi = str(out["nnodes"]) not in ("1", "1:1")
    if multi and given.get("master_addr") is None:
        out["master_addr"] = click.prompt("Address of machine 0 (reachable from all others)")
    if given.get("mixed_precision") is None:
        out["mixed_precision"] = click.prompt("Mixed precision", default=out["mixed_precision"],
                                              type=click.Choice(MIXED_PRECISION))
    return out


def missing(values: dict[str, Any]) -> tuple[str, str] | None:
    """What a multi-node config lacks (node 0's address), as (message, hint); None if
    nothing."""
    nnodes = str(values.get("nnodes") or 1)
    if nnodes in ("1", "1:1") or values.get("master_addr"):
        return None
    return (f"--nnodes {nnodes}: a multi-node config needs node 0's address; nothing written",
            "add --master-addr HOST (node 0's address, reachable from every node; the slurm "
            "and kubernetes exports take it from the job instead)")


def _number(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.isdigit() else value


def answers_to_yaml(values: dict[str, Any]) -> str:
    data = {k: _number(v) for k, v in values.items() if v is not None}
    header = ("# distrun launch config: `distrun config validate` checks it, "
              "`distrun config show` lists every key.\n"
              "# Editors: `distrun config schema > distrun.schema.json`, then keep the next line.\n"
              "# yaml-language-server: $schema=distrun.schema.json\n")
    return header + yaml.safe_dump(data, sort_keys=False)
