"""Reading distrun.yaml: every problem at once, each with its line and key.

The YAML is composed into nodes (which carry line numbers), then checked key by key
against `schema.KEYS`, then across keys. Nothing is executed or constructed from tags;
aliases are followed with a budget, so a "billion laughs" file is refused, not expanded.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from distrun.config.schema import KEYS, NPROC_WORDS, Key, defaults
from distrun.errors import InputError

MAX_BYTES = 1 << 20
MAX_NODES = 20_000
DEFAULT_FILE = "distrun.yaml"


@dataclass(frozen=True)
class Problem:
    line: int
    key: str
    message: str
    severity: Literal["error", "warning"] = "error"


@dataclass
class Config:
    path: str
    values: dict[str, Any] = field(default_factory=dict)  # what the file sets, checked
    lines: dict[str, int] = field(default_factory=dict)  # "rdzv.endpoint" -> line
    problems: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def resolved(self) -> dict[str, Any]:
        """Every key: the file's value, else its default."""
        merged = defaults()
        for name, value in self.values.items():
            if isinstance(value, dict) and KEYS[name].kind == "section":
                merged[name].update(value)
            else:
                merged[name] = value
        return merged


def load(path: str) -> Config:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such config file",
                         "create one with `distrun config init`, or give its path")
    if p.is_dir():
        raise InputError(f"{path}: is a directory, not a config file")
    try:
        data = p.read_bytes()[: MAX_BYTES + 1]
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from None
    if len(data) > MAX_BYTES:
        return Config(path, problems=[Problem(1, "", "file larger than 1 MiB: not a config")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Config(path, problems=[Problem(1, "", "not UTF-8 text")])
    return parse(text, path)


def parse(text: str, path: str = DEFAULT_FILE) -> Config:
    config = Config(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else 1
        config.problems.append(Problem(line, "", f"YAML syntax error: {err.problem}"))
        return config
    except yaml.YAMLError as err:
        config.problems.append(Problem(1, "", f"YAML error: {err}"))
        return config
    if root is None:
        return config
    checker = _Checker(config)
    if not isinstance(root, yaml.MappingNode):
        config.problems.append(Problem(_line(root), "", "the file must be a mapping of keys "
                                       "(launcher: ..., nnodes: ...)"))
        return config
    config.values = checker.section(root, KEYS, "")
    _cross_checks(config)
    config.problems.sort(key=lambda p: (p.line, p.key))
    return config


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Checker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.budget = MAX_NODES

    def problem(self, node: yaml.Node, key: str, message: str) -> None:
        self.config.problems.append(Problem(_line(node), key, message))

    def section(self, node: yaml.MappingNode, keys: dict[str, Key], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            self.budget -= 1
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.tag)
            path = f"{prefix}{name}"
            if name in out:
                self.problem(key_node, path, "duplicate key (the later value would win)")
            if name not in keys:
                hint = difflib.get_close_matches(name, list(keys), n=1)
                suffix = f"; did you mean '{prefix}{hint[0]}'?" if hint else ""
                self.problem(key_node, path, f"unknown key '{path}'{suffix}")
                continue
            self.config.lines[path] = _line(key_node)
            value = self.value(value_node, keys[name], path)
            if value is not _INVALID:
                out[name] = value
        return out

    def value(self, node: yaml.Node, key: Key, path: str) -> Any:
        if self.budget <= 0:
            self.problem(node, path, "too many nodes (aliases expanding?): refused")
            return _INVALID
        self.budget -= 1
        if key.kind == "section":
            if not isinstance(node, yaml.MappingNode):
                self.problem(node, path, f"'{path}' must be a mapping of keys")
                return _INVALID
            return self.section(node, key.keys, f"{path}.")
        if key.kind == "list":
            return self.string_list(node, path)
        if key.kind == "map":
            return self.string_map(node, path)
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, path, f"'{path}' must be a single value, not a "
                         f"{'list' if isinstance(node, yaml.SequenceNode) else 'mapping'}")
            return _INVALID
        value = _scalar(node)
        if value is None:
            if key.default is None:
                return None
            self.problem(node, path, f"'{path}' is empty: give a value or remove the key")
            return _INVALID
        checked = _check_scalar(key, value)
        if isinstance(checked, _Bad):
            self.problem(node, path, f"'{path}': {checked.message}")
            return _INVALID
        return checked

    def string_list(self, node: yaml.Node, path: str) -> Any:
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, path, f"'{path}' must be a list")
            return _INVALID
        items = []
        for item in node.value:
            self.budget -= 1
            if self.budget <= 0:
                self.problem(node, path, "too many nodes (aliases expanding?): refused")
                return _INVALID
            if not isinstance(item, yaml.ScalarNode) or _scalar(item) is None:
                self.problem(item, path, f"'{path}' items must be plain values")
                return _INVALID
            items.append(str(item.value))
        return items

    def string_map(self, node: yaml.Node, path: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, path, f"'{path}' must be a mapping of NAME: value")
            return _INVALID
        out = {}
        for key_node, value_node in node.value:
            self.budget -= 1
            if not isinstance(key_node, yaml.ScalarNode) or not isinstance(
                    value_node, yaml.ScalarNode):
                self.problem(key_node, path, f"'{path}' entries must be NAME: value")
                return _INVALID
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_node.value):
                self.problem(key_node, f"{path}.{key_node.value}",
                             f"'{key_node.value}' is not a valid environment variable name")
                continue
            out[key_node.value] = str(value_node.value)
        return out


class _Bad:
    def __init__(self, message: str) -> None:
        self.message = message


_INVALID = object()


def _scalar(node: yaml.ScalarNode) -> Any:
    """The value of a scalar from its resolved YAML tag, constructing nothing else."""
    tag = node.tag
    if tag.endswith(":null"):
        return None
    if tag.endswith(":bool"):
        return node.value.lower() in ("true", "yes", "on", "y")
    if tag.endswith(":int"):
        try:
            return int(node.value.replace("_", ""), 0)
        except ValueError:
            return node.value
    if tag.endswith(":float"):
        try:
            return float(node.value.replace("_", ""))
        except ValueError:
            return node.value
    return node.value


def _check_scalar(key: Key, value: Any) -> Any:
    if key.kind == "bool":
        return value if isinstance(value, bool) else _Bad(f"expected true or false, got {value!r}")
    if key.kind in ("int", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                key.kind == "int" and not isinstance(value, int)):
            return _Bad(f"expected {'an integer' if key.kind == 'int' else 'a number'}, "
                        f"got {value!r}")
        return _range(key, value)
    if key.kind == "nnodes":
        return _nnodes(value)
    if key.kind == "nproc":
        if isinstance(value, int) and not isinstance(value, bool):
            return value if value >= 1 else _Bad("must be at least 1")
        if value in NPROC_WORDS:
            return value
        return _Bad(f"expected a number or one of {', '.join(NPROC_WORDS)}, got {value!r}")
    if isinstance(value, bool):
        return _Bad(f"expected text, got {str(value).lower()} (quote it)")
    text = str(value)
    if key.choices and text not in key.choices:
        hint = difflib.get_close_matches(text, key.choices, n=1)
        more = f"; did you mean '{hint[0]}'?" if hint else ""
        return _Bad(f"{text!r} is not one of {', '.join(key.choices)}{more}")
    if key.pattern and not re.fullmatch(key.pattern, text):
        return _Bad(f"{text!r} is not in the expected form")
    return text


def _range(key: Key, value: float) -> Any:
    if key.minimum is not None and value < key.minimum:
        return _Bad(f"{value} is below the minimum {key.minimum:g}")
    if key.maximum is not None and value > key.maximum:
        return _Bad(f"{value} is above the maximum {key.maximum:g}")
    return value


def _nnodes(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 1 else _Bad("must be at least 1")
    match = re.fullmatch(r"(\d+):(\d+)", str(value))
    if match and 1 <= int(match[1]) <= int(match[2]):
        return str(value)
    return _Bad(f"expected N or MIN:MAX with 1 <= MIN <= MAX, got {value!r}")


def node_range(nnodes: Any) -> tuple[int, int]:
    if isinstance(nnodes, int):
        return nnodes, nnodes
    low, _, high = str(nnodes).partition(":")
    return int(low), int(high or low)


def _cross_checks(config: Config) -> None:
    v, lines = config.resolved(), config.lines

    def add(key: str, message: str, severity: Literal["error", "warning"] = "error") -> None:
        line = lines.get(key) or lines.get(key.split(".")[0]) or 1
        config.problems.append(Problem(line, key, message, severity))

    low, high = node_range(v["nnodes"])
    rdzv = v["rdzv"]
    c10d = rdzv["backend"] == "c10d" or bool(rdzv["endpoint"])
    if high > 1 and not c10d and not v["master_addr"]:
        add("nnodes", f"nnodes {v['nnodes']}: a multi-node job needs master_addr (node 0's "
            "address) or rdzv.endpoint")
    if low != high and not c10d:
        add("nnodes", f"nnodes {v['nnodes']} is elastic: set rdzv.endpoint (c10d rendezvous)")
    if rdzv["backend"] == "c10d" and not rdzv["endpoint"]:
        add("rdzv.backend", "rdzv.backend c10d needs rdzv.endpoint (HOST:PORT)")
    if rdzv["endpoint"] and not re.fullmatch(r"[^:\s]+(:\d{1,5})?", str(rdzv["endpoint"])):
        add("rdzv.endpoint", f"rdzv.endpoint {rdzv['endpoint']!r} is not HOST:PORT")
    if not c10d and not 0 <= v["node_rank"] < high:
        add("node_rank", f"node_rank {v['node_rank']} is outside 0..{high - 1} "
            f"(nnodes {v['nnodes']})")
    if v["launcher"] == "accelerate" and low != high:
        add("launcher", "accelerate cannot run an elastic job (nnodes MIN:MAX)")
    script = v["script"]
    if script and not v["module"]:
        here = Path(config.path).parent
        if not Path(script).exists() and not (here / script).exists():
            add("script", f"script {script!r} does not exist (yet?)", "warning")
