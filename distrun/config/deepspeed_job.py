"""The `deepspeed:` section of distrun.yaml: which DeepSpeed config the job reads, that file
checked together with the job, and the config `config export --format deepspeed` writes.

The file the job reads is `deepspeed.config` (relative to distrun.yaml's folder; `distrun
launch --config` gives the workers its absolute path as DS_CONFIG), else ds_config.json
beside the script: where `distrun convert --to deepspeed` writes it, and where the
converted script looks when DS_CONFIG is not set. The implied file is only looked for in
a job that uses DeepSpeed (`launcher: deepspeed`, or a `deepspeed:` section).

Checks: the file as `distrun config validate ds_config.json` checks it (against the job's
world size when nnodes and nproc_per_node are numbers), each problem with the file's path
and line; a `deepspeed.config` that does not exist (a missing ds_config.json beside the
script is no problem: the export builds one); and every `deepspeed:` key that is set must
agree with the file. That last one is an error, not a warning: the job reads the file, so
a section saying otherwise would be ignored without a word.

The exported config is the file's content with the section's keys written in, or, with no
file, one built from the section like `convert --to deepspeed` builds it: concrete values
only (never "auto"), gradient clipping written out (DeepSpeed 0.19.8 clips at 1.0 when the
key is missing), `zero_allow_untested_optimizer` under ZeRO and `zero_force_ds_cpu_optimizer`
false with offload (the script hands DeepSpeed its own torch optimizer), and the job's
mixed_precision as convert's --amp writes it. Nothing here imports torch or deepspeed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from distrun.config import deepspeed
from distrun.config.records import Config
from distrun.config.schema import DEEPSPEED_BUILT
from distrun.errors import InputError
from distrun.launch_rules import show

NAME = "ds_config.json"
# `deepspeed:` key -> (the ds_config key it stands for, DeepSpeed 0.19.8's value when the
# file leaves that key out; None: no single value, nothing to compare)
FILE_KEYS: dict[str, tuple[str, object]] = {
    "zero_stage": ("zero_optimization.stage", 0),
    "offload_optimizer": ("zero_optimization.offload_optimizer.device", "none"),
    "micro_batch": ("train_micro_batch_size_per_gpu", None),
    "gradient_clipping": ("gradient_clipping", 1.0),
}
Add = Callable[[str, str, Literal["error", "warning"]], None]
_MISSING = object()


@dataclass(frozen=True)
class DsFile:
    path: Path
    explicit: bool  # named by deepspeed.config (then a missing file is an error)


def section(config: Config) -> dict[str, Any]:
    """The `deepspeed:` keys the file sets to a value (none: an empty dict)."""
    return {k: v for k, v in config.values.get("deepspeed", {}).items() if v is not None}


def ds_file(config: Config) -> DsFile | None:
    """The DeepSpeed config the job reads (it may not exist), or None for a job that does
    not use DeepSpeed."""
    here = Path(config.path).parent
    if section(config).get("config"):
        return DsFile(here / section(config)["config"], True)
    r = config.resolved()
    uses = "deepspeed" in config.values or r["launcher"] == "deepspeed"
    if not uses or not r["script"] or r["module"]:
        return None
    beside = [Path(r["script"]).parent / NAME, here / Path(r["script"]).parent / NAME]
    return DsFile(next((p for p in beside if _is_file(p)), beside[0]), False)


def ds_config_env(config: Config, absolute: bool) -> dict[str, str]:
    """DS_CONFIG for the workers when `deepspeed.config` is set: its absolute path for a
    launch here, the path relative to where distrun.yaml is read from for an export."""
    found = ds_file(config)
    if found is None or not found.explicit:
        return {}
    return {"DS_CONFIG": os.path.abspath(found.path) if absolute else str(found.path)}


def world_size(r: dict[str, Any]) -> int | None:
    nnodes, nproc = r["nnodes"], r["nproc_per_node"]
    if isinstance(nnodes, int) and isinstance(nproc, int):
        return nnodes * nproc
    return None


def check(config: Config, add: Add) -> None:
    """The `deepspeed:` section and the DeepSpeed config the job reads, as problems."""
    r, keys = config.resolved(), section(config)
    if r["launcher"] == "deepspeed" and r["max_restarts"]:
        add("max_restarts", f"the deepspeed launcher restarts nothing: max_restarts "
            f"{r['max_restarts']} cannot apply; set max_restarts: 0, or launcher: torchrun",
            "error")
    if keys.get("offload_optimizer") == "cpu" and keys.get("zero_stage") == 0:
        add("deepspeed.offload_optimizer", "offload_optimizer cpu needs ZeRO: at zero_stage 0 "
            "DeepSpeed ignores it; set zero_stage 1, 2 or 3", "error")
    found = ds_file(config)
    if found is None:
        return
    key = "deepspeed.config" if found.explicit else (
        "deepspeed" if "deepspeed" in config.values else "launcher")
    if not _is_file(found.path):
        if found.explicit:
            add(key, f"deepspeed.config {show(keys['config'])}: no such file ({found.path}); "
                "give its path relative to this file, or build one with `distrun config "
                "export --format deepspeed -o FILE`", "error")
        return
    try:
        ds = deepspeed.load(str(found.path), world_size(r))
    except InputError as err:
        add(key, err.message, "error")
        return
    for problem in ds.problems:
        add(key, f"{found.path}:{problem.line}: {problem.message}", problem.severity)
    for name, value in keys.items():
        disagreement = _disagreement(name, value, ds, found.path)
        if disagreement:
            add(f"deepspeed.{name}", disagreement, "error")


def _disagreement(name: str, mine: object, ds: Config, path: Path) -> str | None:
    if name not in FILE_KEYS or not ds.values:
        return None
    ds_key, default = FILE_KEYS[name]
    theirs = lookup(ds.values, ds_key)
    if theirs is _MISSING:
        if default is None:
            return None
        theirs, said = default, f"{path} leaves out {ds_key} (DeepSpeed then uses {default})"
    else:
        said = f"{path}:{ds.lines.get(ds_key, 1)} sets {ds_key} to {json.dumps(theirs)}"
    if _number(mine) is not None and _number(theirs) is not None:
        same = _number(mine) == _number(theirs)
    else:
        same = not isinstance(theirs, str) or theirs == mine  # "auto": already an error
    if same:
        return None
    return (f"deepspeed.{name} is {mine}, but {said}: the job reads the file; make them "
            f"agree, or remove deepspeed.{name} (the file decides)")


def lookup(data: object, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        return False


def ds_config(config: Config, r: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The DeepSpeed config of the job, and where it came from (for the export)."""
    keys = section(config)
    found = ds_file(config)
    if found is not None and _is_file(found.path):
        data = dict(deepspeed.load(str(found.path)).values)
        for name, value in keys.items():
            if name in FILE_KEYS:
                _put(data, FILE_KEYS[name][0], value)
        return data, str(found.path)
    if keys.get("micro_batch") is None:
        raise InputError(f"{config.path}: no DeepSpeed config to export: deepspeed.config is "
                         f"not set and there is no {NAME} beside the script, so one is built "
                         "from the deepspeed: section, which needs the batch per process",
                         "set deepspeed.micro_batch: N (DeepSpeed's "
                         "train_micro_batch_size_per_gpu), or deepspeed.config: FILE")
    built = {**DEEPSPEED_BUILT, **keys}
    zero: dict[str, Any] = {"stage": built["zero_stage"]}
    data = {"train_micro_batch_size_per_gpu": built["micro_batch"],
            "gradient_accumulation_steps": built["gradient_accumulation_steps"],
            "gradient_clipping": float(built["gradient_clipping"]), "zero_optimization": zero}
    if zero["stage"] > 0:
        data["zero_allow_untested_optimizer"] = True
    if built["offload_optimizer"] == "cpu":
        zero["offload_optimizer"] = {"device": "cpu"}
        data["zero_force_ds_cpu_optimizer"] = False
    if r["mixed_precision"] == "fp16":
        data["fp16"] = {"enabled": True, "auto_cast": True}
    elif r["mixed_precision"] == "bf16":
        data["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    return data, f"the deepspeed: section of {config.path}"


def _put(data: dict[str, Any], dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data[part] = dict(data[part])
        data = data[part]
    data[last] = value
