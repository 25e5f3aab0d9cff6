"""The types and ranges of a DeepSpeed config's values, as DeepSpeed 0.19.8 reads them.

Two kinds of reader in DeepSpeed, two kinds of rule here:
- `zero_optimization` (with `offload_param`, `offload_optimizer`), `fp16` and `bf16` go
  through pydantic models (`extra="forbid"`, lax coercion, "auto" dropped first). Their
  fields are not written here: deepspeed_models.py is generated from the installed
  DeepSpeed's models (tests/config/make_deepspeed_models.py). What pydantic refuses is an
  error (ValidationError at initialize); what it converts ("8" to 8, "true" to True) is a
  warning: DeepSpeed runs, but the file says one thing and means another.
- the other keys are read with `dict.get` and used as they are (runtime/config.py,
  engine.py, lr_schedules.py): a string where a number is compared fails with a
  TypeError, a string where a flag is tested counts as true, `true` where a number is
  used counts as 1. `TOP` and `_BLOCKS` hold those keys, each with where DeepSpeed uses it.

"auto" is skipped here: deepspeed.py names each one (what fills it in, what DeepSpeed alone
does with it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from distrun.config.deepspeed_models import MODELS, SECTIONS
from distrun.config.jsonc import Member, Node, plain
from distrun.config.records import Problem

_INT_TEXT = re.compile(r"\s*[-+]?\d+(\.0*)?\s*")
# pydantic's lax bool: the strings it converts (lower case)
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n"}


@dataclass(frozen=True)
class Rule:
    kind: str  # "int", "number", "bool", "str", "object"
    low: float | None = None  # smallest allowed
    above: bool = False  # low itself excluded
    where: str = ""  # what DeepSpeed does with a wrong value
    none: bool = False  # null allowed


_BATCH = "runtime/config.py `_batch_assertion`: `{} > 0`"
_FLAG = "used as a condition, where any string (\"false\" too) counts as true"
TOP: dict[str, Rule] = {
    "train_batch_size": Rule("int", 0, True, _BATCH.format("train_batch")),
    "train_micro_batch_size_per_gpu": Rule("int", 0, True, _BATCH.format("micro_batch")),
    "gradient_accumulation_steps": Rule("int", 0, True, _BATCH.format("grad_acc")),
    "gradient_clipping": Rule("number", 0, False, "engine.py clips when "
                              "`gradient_clipping() > 0.0`"),
    "steps_per_print": Rule("int", 0, True, "engine.py prints every N steps", none=True),
    "gradient_predivide_factor": Rule("number", 0, True, "engine.py divides gradients by it"),
    **{key: Rule("bool", where=_FLAG) for key in (
        "prescale_gradients", "wall_clock_breakdown", "memory_breakdown", "dump_state",
        "disable_allgather", "sparse_gradients", "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer")},
    **{key: Rule("object", where="read as a dict") for key in (
        "optimizer", "scheduler", "torch_autocast", "activation_checkpointing",
        "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger",
        "checkpoint", "data_types", "aio", "compile")},
}
# "optimizer.params" keys: torch's optimizers refuse what is not a number (`0.0 <= lr`)
_BLOCKS: dict[str, Rule] = {
    "optimizer.type": Rule("str", where="engine.py calls `optimizer_name().lower()`"),
    "optimizer.params": Rule("object", where="engine.py passes it as `**params`"),
    "optimizer.params.lr": Rule("number", 0, False, "the optimizer checks `0.0 <= lr`"),
    "optimizer.params.eps": Rule("number", 0, False, "the optimizer checks `0.0 <= eps`"),
    "optimizer.params.weight_decay": Rule("number", 0, False, "the optimizer checks "
                                          "`0.0 <= weight_decay`"),
    "scheduler.type": Rule("str", where="engine.py looks it up by name"),
    "scheduler.params": Rule("object", where="engine.py passes it as `**params`"),
    "scheduler.params.warmup_min_lr": Rule("number", 0, False, "lr_schedules.py computes "
                                           "learning rates from it"),
    "scheduler.params.warmup_max_lr": Rule("number", 0, False, "lr_schedules.py computes "
                                           "learning rates from it"),
    "scheduler.params.warmup_num_steps": Rule("int", 0, True, "lr_schedules.py refuses "
                                              "anything but a positive integer"),
    "scheduler.params.total_num_steps": Rule("int", 0, True, "lr_schedules.py compares it "
                                             "with the step count"),
}


def check(root: Node) -> list[Problem]:
    """Every value of `root` (a JSON object) whose type or range DeepSpeed refuses or
    misreads, at its line."""
    found: list[Problem] = []
    for member in root.value:
        key = member.key
        node = member.node
        if _is_auto(node):
            continue
        if key in SECTIONS and not (key == "zero_optimization" and node.kind == "word"
                                    and isinstance(node.value, bool)):
            found += _model(member, key, SECTIONS[key])
        elif key in TOP:
            found += _rule(member, key, TOP[key])
        if key in ("optimizer", "scheduler") and node.kind == "object":
            found += _block(node, key)
        if key == "zero_optimization" and node.kind == "word" and node.value is True:
            found.append(Problem(member.line, key, (
                "zero_optimization is true: DeepSpeed reads this old form as ZeRO stage 1 "
                "(with a deprecation warning); write {\"stage\": 1}"), "warning"))
    return found


def _block(node: Node, prefix: str) -> list[Problem]:
    found: list[Problem] = []
    for path, member in _walk(node, f"{prefix}."):
        if path in _BLOCKS and not _is_auto(member.node):
            found += _rule(member, path, _BLOCKS[path])
    params = next((m for m in node.value if m.key == "params"), None)
    betas = next((m for m in params.node.value if m.key == "betas"), None) if (
        params is not None and params.node.kind == "object") else None
    if betas is not None and not _is_auto(betas.node):
        value = plain(betas.node)
        if not (isinstance(value, list) and len(value) == 2 and all(
                _is_number(v) and 0 <= v < 1 for v in value)):
            found.append(Problem(betas.line, f"{prefix}.params.betas", (
                f"{prefix}.params.betas is {_show(value)}: DeepSpeed passes it to the "
                "optimizer, which needs two numbers in [0, 1), e.g. [0.9, 0.999]")))
    return found


def _walk(node: Node, prefix: str) -> Iterator[tuple[str, Member]]:
    if node.kind == "object":
        for member in node.value:
            yield f"{prefix}{member.key}", member
            yield from _walk(member.node, f"{prefix}{member.key}.")


def _rule(member: Member, path: str, rule: Rule) -> list[Problem]:
    value = plain(member.node)
    if value is None and rule.none:
        return []
    wrong = _wrong(value, rule)
    if wrong is None:
        return []
    return [Problem(member.line, path, f"{path} is {_show(value)}: {wrong} ({rule.where})")]


def _wrong(value: Any, rule: Rule) -> str | None:
    """Why `value` breaks `rule`, or None."""
    want = {"int": "a whole number", "number": "a number", "bool": "true or false",
            "str": "a string", "object": "an object ({...})"}[rule.kind]
    if rule.kind == "bool":
        return None if isinstance(value, bool) else f"DeepSpeed needs {want}"
    if rule.kind == "str":
        return None if isinstance(value, str) else f"DeepSpeed needs {want}"
    if rule.kind == "object":
        return None if isinstance(value, dict) else f"DeepSpeed needs {want}"
    if isinstance(value, bool):
        return (f"DeepSpeed needs {want}; it reads {json_word(value)} as "
                f"{int(value)}, silently")
    if isinstance(value, str):
        return f"DeepSpeed needs {want}, and a string there fails (TypeError)"
    if not _is_number(value):
        return f"DeepSpeed needs {want}"
    if rule.kind == "int" and not float(value).is_integer():
        return f"DeepSpeed needs {want}"
    if rule.low is not None and (value < rule.low or (rule.above and value == rule.low)):
        return f"DeepSpeed needs a value {'>' if rule.above else '>='} {rule.low:g}"
    return None


def _model(member: Member, path: str, model: str) -> list[Problem]:
    """A value read by DeepSpeed's pydantic model `model`, checked as pydantic would."""
    node = member.node
    if node.kind != "object":
        return [Problem(member.line, path, (
            f"{path} is {_show(plain(node))}: DeepSpeed reads it with its pydantic model "
            f"{model}, which needs an object ({{...}}); it fails at initialize (TypeError)"))]
    fields = MODELS[model]
    found: list[Problem] = []
    for child in node.value:
        where = f"{path}.{child.key}"
        if _is_auto(child.node):
            continue
        if child.key not in fields:
            found.append(Problem(child.line, where, (
                f"unknown key {where}: DeepSpeed's model {model} refuses keys it does not "
                "know (pydantic: \"Extra inputs are not permitted\") at initialize")))
            continue
        found += _field(child, where, fields[child.key])
    return found


def _field(member: Member, path: str, rule: dict[str, Any]) -> list[Problem]:
    value = plain(member.node)
    kind = rule["type"]
    if kind == "model":
        if value is None and rule.get("none"):
            return []
        return _model(member, path, rule["model"])
    if kind == "any" or (value is None and rule.get("none")):
        return []
    said = f"{path} is {_show(value)}: "
    refused = " (pydantic ValidationError at initialize)"
    if kind == "enum":
        if any(value == v and type(value) is not bool for v in rule["values"]):
            return []
        values = ", ".join(_show(v) for v in rule["values"])
        return [Problem(member.line, path, f"{said}DeepSpeed takes one of {values}{refused}")]
    if kind in ("str", "path"):
        return [] if isinstance(value, str) else [
            Problem(member.line, path, f"{said}DeepSpeed needs a string{refused}")]
    if kind == "bool":
        if isinstance(value, bool):
            return []
        if (isinstance(value, str) and value.lower() in _BOOL_WORDS) or value in (0, 1):
            meant = json_word(str(value).lower() in ("true", "yes", "on", "1", "t", "y"))
            return [Problem(member.line, path, (
                f"{said}DeepSpeed's pydantic model converts it to {meant}; write true or "
                "false"), "warning")]
        return [Problem(member.line, path, f"{said}DeepSpeed needs true or false{refused}")]
    number = _coerced(value, kind)
    if number is None or (kind == "int" and not float(number).is_integer()):
        want = "a whole number" if kind == "int" else "a number"
        return [Problem(member.line, path, f"{said}DeepSpeed needs {want}{refused}")]
    for bound, test, sign in (("gt", number.__gt__, ">"), ("ge", number.__ge__, ">="),
                              ("lt", number.__lt__, "<"), ("le", number.__le__, "<=")):
        if bound in rule and not test(rule[bound]):
            return [Problem(member.line, path, (
                f"{said}DeepSpeed needs a value {sign} {rule[bound]:g}{refused}"))]
    if not _is_number(value):
        return [Problem(member.line, path, (
            f"{said}DeepSpeed's pydantic model converts it to {number:g}; write the number"),
            "warning")]
    return []


def _coerced(value: Any, kind: str) -> float | None:
    """The number pydantic's lax mode makes of `value`, if any (a string for an int
    field: digits, maybe ".0"; "5e8" is refused)."""
    if _is_number(value):
        return float(value)
    if isinstance(value, str) and kind == "int" and not _INT_TEXT.fullmatch(value):
        return None
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_auto(node: Node) -> bool:
    return node.kind == "string" and str(node.value).lower() == "auto"


def json_word(value: bool) -> str:
    return "true" if value else "false"


def _show(value: Any) -> str:
    import json

    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
