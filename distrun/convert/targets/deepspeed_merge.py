"""The config `--to deepspeed` writes: distrun's settings over the user's own config
(`deepspeed_user`), or over nothing when there is none.

Each setting is a key, a value and why. A *strong* one is what the converted code relies
on (the batch the DataLoader reads, the clipping moved out of the code, the accumulation
the script's condition decides, an option given on the command line): it replaces a
different value of the user's config, and the report says so. A *weak* one is distrun's
default (no clipping when the script does not clip, ZeRO-2 when --zero is not given): the
user's value is kept, and the report says what distrun would have written. Every other
key of the user's config is kept as it is. Each key added, changed or removed is a line
of the report, with the line of the user's file it came from.

Also said: a config `optimizer` DeepSpeed will not use (the script's own torch
optimizer is given to deepspeed.initialize, which overrides it), a config `scheduler`
(refused when the script steps a scheduler of its own: both would set the learning
rate), comments the written JSON cannot keep, and the problems `distrun config validate`
finds in the result.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import libcst as cst

from distrun.config import jsonc
from distrun.config.deepspeed import check
from distrun.convert.context import Context
from distrun.convert.models import Model
from distrun.convert.targets.deepspeed_config import Value
from distrun.convert.targets.deepspeed_user import UserConfig, enabled

DROP = object()  # a setting that removes its key
_MISSING = object()
_PRECISION = ("fp16", "bf16", "bfloat16", "torch_autocast")


@dataclass(frozen=True)
class Setting:
    key: str  # "zero_optimization.stage"
    value: Any  # or DROP
    why: str
    strong: bool  # replaces a different value of the user's config
    at: cst.CSTNode | None  # the script's line the report names


@dataclass(frozen=True)
class Found:
    """What the script says the config must hold (see `deepspeed_settings`)."""

    micro: Value | None
    clipping: tuple[float, str, cst.Call | None]
    untested: str | None  # the optimizer ZeRO does not test, if it is one
    accumulation: int
    loader: cst.CSTNode | None
    step: cst.CSTNode | None


def settings(ctx: Context, user: UserConfig, model: Model, found: Found) -> list[Setting]:
    options, base = ctx.options, user.values
    at = model.optimizer
    clip, how, clipped = found.clipping
    out = [
        Setting("train_micro_batch_size_per_gpu", int(found.micro.number) if found.micro
                else 1, f"the training DataLoader's batch_size, {found.micro.how}"
                if found.micro else "the batch size cannot be read from the script",
                found.micro is not None, found.loader or at),
        Setting("gradient_accumulation_steps", max(found.accumulation, 1),
                "the script steps its optimizer under its own condition" if found.accumulation
                else "the script steps its optimizer on every batch", True, found.step or at),
        Setting("gradient_clipping", clip, how, clipped is not None, clipped or at),
        Setting("zero_optimization.stage", options.zero, f"--zero {options.zero}"
                if options.gave("zero") else "distrun's default", options.gave("zero"), at),
    ]
    if options.gave("offload_optimizer"):
        out.append(Setting("zero_optimization.offload_optimizer.device", "cpu",
                           "--offload-optimizer cpu", True, at)
                   if options.offload_optimizer == "cpu" else Setting(
                       "zero_optimization.offload_optimizer", DROP,
                       "--offload-optimizer none", True, at))
    if found.accumulation:
        out.append(Setting("managed_gradient_accumulation", False, "each engine.step() is an "
                           "optimizer step: the script's condition decides", True,
                           found.step or at))
    if found.untested:
        out.append(Setting("zero_allow_untested_optimizer", True, f"`{found.untested}` is not "
                           "one DeepSpeed tests under ZeRO", True, at))
    zero = base.get("zero_optimization")
    offload = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    device = offload.get("device") if isinstance(offload, dict) else None
    if options.offload_optimizer == "cpu" or not options.gave("offload_optimizer") \
            and device in ("cpu", "nvme"):
        out.append(Setting("zero_force_ds_cpu_optimizer", False, "ZeRO-Offload with the "
                           "script's own torch optimizer (DeepSpeed refuses it otherwise)",
                           True, at))
    if not user.took_precision:
        out += _precision(options.amp, base, at)
    elif options.amp == "fp16":  # the script feeds fp32 inputs: DeepSpeed casts them
        out.append(Setting("fp16.auto_cast", True, "the script's inputs are float32: the "
                           "engine casts them to the half model", False, at))
    if "train_batch_size" in base:
        out.append(Setting("train_batch_size", DROP, "DeepSpeed computes it: micro batch x "
                           "accumulation x world size (a fixed one stops every other world "
                           "size)", True, found.loader or at))
    if found.accumulation and options.zero != 2 and isinstance(zero, dict) \
            and zero.get("overlap_comm") is True:
        out.append(Setting("zero_optimization.overlap_comm", False, "with "
                           "managed_gradient_accumulation false DeepSpeed takes overlap_comm "
                           "under ZeRO-2 only", True, found.step or at))
    return out


def _precision(amp: str, base: dict[str, Any], at: cst.CSTNode) -> list[Setting]:
    why = f"--amp {amp}"
    own = [s for s in _PRECISION if enabled(base, s)]
    if amp == "fp16":
        return [Setting("fp16.enabled", True, why, True, at),
                Setting("fp16.auto_cast", True, why + ": the script's autocast is gone", True,
                        at), *(Setting(s, DROP, why, True, at) for s in own if s != "fp16")]
    if amp == "bf16":
        if enabled(base, "bf16") or enabled(base, "bfloat16"):
            return []  # the user's own bf16 (DeepSpeed's bf16 optimizer): kept
        return [Setting("torch_autocast.enabled", True, why, True, at),
                Setting("torch_autocast.dtype", "bfloat16", why, True, at),
                *(Setting(s, DROP, why, True, at) for s in own if s != "torch_autocast")]
    if amp == "none":
        return [Setting(s, DROP, why, True, at) for s in own]
    return []


def merge(base: dict[str, Any], chosen: list[Setting]
          ) -> tuple[dict[str, Any], list[tuple[Setting, Any]], list[tuple[Setting, Any]]]:
    """The user's config with the settings made: the config, the settings that added,
    changed or removed a key (with the old value, or _MISSING), and the weak ones whose
    different user value was kept."""
    data = copy.deepcopy(base)
    done: list[tuple[Setting, Any]] = []
    kept: list[tuple[Setting, Any]] = []
    for setting in chosen:
        *path, last = setting.key.split(".")
        holder: dict[str, Any] | None = data
        for part in path:
            inner = holder.get(part) if holder is not None else None
            if not isinstance(inner, dict):
                if setting.value is DROP or holder is None:
                    holder = None
                    break
                inner = holder[part] = {}
            holder = inner
        if holder is None:
            continue
        old = holder.get(last, _MISSING)
        if setting.value is DROP:
            if old is not _MISSING:
                del holder[last]
                done.append((setting, old))
        elif old is _MISSING or setting.strong and _differ(old, setting.value):
            holder[last] = setting.value
            done.append((setting, old))
        elif _differ(old, setting.value):
            kept.append((setting, old))
    return data, done, kept


def _differ(a: Any, b: Any) -> bool:
    return a != b or isinstance(a, bool) != isinstance(b, bool)


def write(ctx: Context, user: UserConfig, model: Model, found: Found) -> str:
    """The config's text; each key added, changed or kept reported (with a user's config)."""
    data, done, kept = merge(user.values, settings(ctx, user, model, found))
    text = json.dumps(data, indent=2) + "\n"
    if user.source is None:
        return text
    plan, name, shown = ctx.plan, user.name, user.shown
    for setting, old in done:
        was = f" (line {user.lines[setting.key]} of {shown})" if setting.key in user.lines \
            else ""
        if setting.value is DROP:
            what = f"removed, was {_dump(old)}{was}"
        elif old is _MISSING:
            what = f"{_dump(setting.value)} added"
        else:
            what = f"{_dump(old)}{was} -> {_dump(setting.value)}"
        plan.change(setting.at or model.optimizer, "deepspeed.config_merge",
                    f"{name}: `{setting.key}` {what}: {setting.why}")
    for setting, old in kept:
        plan.finding(setting.at, "deepspeed.config_kept", f"{name}: `{setting.key}` "
                     f"{_dump(old)} kept from {shown} (distrun alone writes "
                     f"{_dump(setting.value)}: {setting.why})", severity="info")
    _sections(ctx, user, model)
    if user.comments:
        plan.finding(None, "deepspeed.config_comments", f"{shown}'s {user.comments} "
                     f"comment(s) are not in the {name} written (plain JSON)",
                     f"copy them back from {name}.orig if you need them", severity="info")
    for problem in check(jsonc.parse(text)):
        if problem.severity == "error":
            plan.finding(None, "deepspeed.config_check", f"{name}:{problem.line}: "
                         f"{problem.message}", f"fix it in {shown}, then convert again")
    return text


def _sections(ctx: Context, user: UserConfig, model: Model) -> None:
    """The user's `optimizer` and `scheduler` sections, against the script's own."""
    facts, values, shown = ctx.facts, user.values, user.shown
    optimizer = values.get("optimizer")
    if isinstance(optimizer, dict):
        mine = facts.code(model.optimizer.func) if isinstance(model.optimizer, cst.Call) \
            else "optimizer"
        ctx.plan.finding(model.optimizer, "deepspeed.config_optimizer",
                         f"{shown}'s optimizer ({optimizer.get('type', '?')}) is not used: "
                         f"deepspeed.initialize is given the script's own `{mine}`, which "
                         "overrides it (kept in the file)", "remove the section, or give "
                         "the script's optimizer the values you want")
    scheduler = values.get("scheduler")
    if not isinstance(scheduler, dict):
        return
    kind = scheduler.get("type", "?")
    own = next((c for c in facts.calls if (facts.call_name(c) or "").startswith(
        "torch.optim.lr_scheduler.") or (facts.call_name(c) or "").startswith(
        "transformers.") and "schedule" in (facts.call_name(c) or "")), None)
    if own is not None:
        ctx.refuse(own, "deepspeed.config_scheduler", f"{shown} sets a scheduler ({kind}) "
                   f"and the script steps its own `{facts.code(own.func)}`: DeepSpeed would "
                   "step both, each setting the learning rate", f"remove the scheduler "
                   f"section from {shown} (the script's schedule is kept), or the script's "
                   "scheduler")
        return
    ctx.plan.finding(model.optimizer, "deepspeed.config_scheduler",
                     f"{shown}'s scheduler ({kind}) sets the learning rate at every "
                     "engine.step(): the run follows it, not the script's own learning rate",
                     f"remove the scheduler section from {shown} to train as the original "
                     "script does")


def _dump(value: Any) -> str:
    return json.dumps(value)
