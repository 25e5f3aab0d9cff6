"""One value of distrun.yaml against its key: its type, its range or choices, and the launch
rule that judges it (the one `distrun launch` applies to the same setting). A value that
fails is a `Bad` carrying the message; the caller gives it its line.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

from distrun import launch_rules as rules
from distrun.config.schema import Key
from distrun.launch_rules import Verdict, show


def bad_text(text: str) -> str | None:
    """Why `text` cannot be passed to a process (argv, environment, path), if it cannot."""
    if "\0" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    return None


class Bad:
    def __init__(self, message: str) -> None:
        self.message = message


INVALID = object()  # a value that was refused (its problem is recorded)


def check_scalar(key: Key, value: Any) -> Any:
    """`value` as the key takes it, or a `Bad` saying why not."""
    if key.kind == "bool":
        return value if isinstance(value, bool) else Bad(
            f"expected true or false, got {show(value)}")
    if key.kind in ("int", "number"):
        return _number(key, value)
    if key.kind == "nnodes":
        nodes = rules.node_range(value)
        return Bad(nodes.message) if isinstance(nodes, Verdict) else value
    if key.kind == "nproc":
        counted = rules.nproc(value)
        return Bad(counted.message) if isinstance(counted, Verdict) else value
    return _text(key, value)


def _number(key: Key, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            key.kind == "int" and not isinstance(value, int)):
        return Bad(f"expected {'an integer' if key.kind == 'int' else 'a number'}, "
                   f"got {show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        return Bad(f"expected a finite number, got {value}")
    if abs(value) >= 2 ** 63:  # more than the tools downstream hold (64-bit integers)
        return Bad(f"{show(value)} is too large")
    if key.rule == "port":
        return _verdict(rules.port("", int(value)), value)
    return _range(key, value)


def _text(key: Key, value: Any) -> Any:
    if isinstance(value, bool):
        return Bad(f"expected text, got {str(value).lower()} (quote it)")
    text = str(value)
    why = bad_text(text)
    if why:
        return Bad(f"{show(text)} {why}")
    if key.choices == rules.LAUNCHERS and text in rules.LAUNCH_ONLY:
        return Bad(f"{show(text)} is a launcher of `distrun launch` only (one command runs "
                   "every node's ranks, which an export per node cannot describe): leave it "
                   f"out and give --launcher {text} to `distrun launch --config`")
    if key.choices and text not in key.choices:
        hint = difflib.get_close_matches(text, key.choices, n=1)
        more = f"; did you mean '{hint[0]}'?" if hint else ""
        return Bad(f"{show(text)} is not one of {', '.join(key.choices)}{more}")
    if key.pattern and not re.fullmatch(key.pattern, text):
        return Bad(f"{show(text)} is not in the expected form" + (
            f" ({key.form})" if key.form else ""))
    if key.rule == "host":
        return _verdict(rules.host("", text), text)
    if key.rule == "endpoint":
        parsed = rules.endpoint(text)
        return _verdict(parsed if isinstance(parsed, Verdict) else None, text)
    return text


def _verdict(verdict: Verdict | None, value: Any) -> Any:
    """`value` if a launch rule let it pass, else what the rule said."""
    return value if verdict is None else Bad(verdict.text())


def check_entry(path: str, name: str, value: str) -> Verdict | None:
    """An entry of a map (env, rdzv.conf): its name, and its value as text."""
    verdict = rules.rdzv_setting(name, value) if path == "rdzv.conf" else rules.env_name(name)
    why = bad_text(value) if verdict is None else None
    if why:
        verdict = Verdict(f"{path}.{name}", f"'{path}.{name}': the value {why}")
    return verdict


def _range(key: Key, value: float) -> Any:
    if key.minimum is not None and value < key.minimum:
        return Bad(f"{show(value)} is below the minimum {key.minimum:g}")
    if key.maximum is not None and value > key.maximum:
        return Bad(f"{show(value)} is above the maximum {key.maximum:g}")
    return value
