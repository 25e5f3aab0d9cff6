"""Reading distrun.yaml: every problem at once, each with its line and key.

The YAML is composed into nodes (which carry line numbers), then checked key by key
against `schema.KEYS`, then across keys. Nothing is executed or constructed from tags, and
a tag other than YAML's plain types (`!!python/object`, `!custom`...) is refused. The input
is bounded: 1 MiB, 20,000 nodes, 100 levels of nesting; aliases and merge keys (`<<`) are
followed with a budget, so a "billion laughs" file is refused, not expanded.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml

from distrun import launch_rules as rules
from distrun.config import (
    deepspeed_job,  # it reads DeepSpeed configs with this module
    slurm_export,
)
from distrun.config.nodes import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_PROBLEMS,
    MERGE,
    compose,
    key_id,
    line_of,
    scalar,
)
from distrun.config.records import MAX_BYTES, Config, Problem, read
from distrun.config.schema import KEYS, Key
from distrun.config.values import INVALID, Bad, bad_text, check_entry, check_scalar
from distrun.launch_rules import Verdict, clip, show

DEFAULT_FILE = "distrun.yaml"
__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "Config", "Problem", "load", "node_range",
           "parse", "read"]


def load(path: str) -> Config:
    text = read(path)
    return parse(text, path) if isinstance(text, str) else Config(path, problems=[text])


def parse(text: str, path: str = DEFAULT_FILE) -> Config:
    config = Config(path)
    root, refused = compose(text)
    config.problems.extend(Problem(line, "", message) for line, message in refused)
    if refused or root is None:
        return config
    if not isinstance(root, yaml.MappingNode):
        config.problems.append(Problem(line_of(root), "", "the file must be a mapping of keys "
                                       "(launcher: ..., nnodes: ...)"))
        return config
    config.values = _Checker(config).section(root, KEYS, "")
    _cross_checks(config)
    config.problems.sort(key=lambda p: (p.line, p.key))
    if len(config.problems) > MAX_PROBLEMS:
        rest = config.problems[MAX_PROBLEMS:]
        config.problems[MAX_PROBLEMS:] = [Problem(
            rest[0].line, "", f"{len(rest)} more problem(s) not listed", rest[0].severity)]
    return config


class _Checker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.budget = MAX_NODES

    def problem(self, node: yaml.Node, key: str, message: str) -> None:
        self.config.problems.append(Problem(line_of(node), key, message))

    def spent(self, node: yaml.Node, path: str, cost: int = 1) -> bool:
        """Count `cost` nodes visited; True (and say so) once the budget is gone."""
        self.budget -= cost
        if self.budget < 0:
            if self.budget + cost >= 0:
                self.problem(node, path, "too many nodes (aliases expanding?): refused")
            return True
        return False

    def pairs(self, node: yaml.MappingNode, path: str,
              merging: tuple[yaml.Node, ...] = ()) -> list[tuple[yaml.Node, yaml.Node]]:
        """The mapping's entries with merge keys (`<<: *base`) applied: keys written in
        the mapping win over merged ones, and an earlier merged mapping over a later one."""
        written: list[tuple[yaml.Node, yaml.Node]] = []
        merged: dict[object, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if self.spent(key_node, path):
                break
            if key_node.tag != MERGE:
                written.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [
                value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    self.problem(source, path or "<<", "'<<' merges a mapping (or a list of "
                                 "mappings), e.g. <<: *base")
                elif source is node or source in merging or len(merging) >= MAX_DEPTH:
                    self.problem(source, path or "<<", "'<<' merges a mapping into itself")
                else:
                    for entry in self.pairs(source, path, (*merging, node)):
                        merged.setdefault(key_id(entry[0]), entry)
        names = {key_id(key_node) for key_node, _ in written}
        return [e for name, e in merged.items() if name not in names] + written

    def key_name(self, key_node: yaml.Node, prefix: str) -> str | None:
        if isinstance(key_node, yaml.ScalarNode):
            return str(key_node.value)
        what = "a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping"
        self.problem(key_node, prefix.rstrip("."), f"a key must be a plain name, not {what}")
        return None

    def section(self, node: yaml.MappingNode, keys: dict[str, Key], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for key_node, value_node in self.pairs(node, prefix.rstrip(".")):
            name = self.key_name(key_node, prefix)
            if name is None:
                continue
            path = f"{prefix}{clip(name, 200)}"
            if name in seen:
                self.problem(key_node, path, "duplicate key (the later value would win)")
            seen.add(name)
            if name not in keys:
                hint = difflib.get_close_matches(name, list(keys), n=1)
                suffix = f"; did you mean '{prefix}{hint[0]}'?" if hint else ""
                self.problem(key_node, path, f"unknown key '{clip(path)}'{suffix}")
                continue
            self.config.lines[path] = line_of(key_node)
            value = self.value(value_node, keys[name], path)
            if value is not INVALID:
                out[name] = value
        return out

    def value(self, node: yaml.Node, key: Key, path: str) -> Any:
        if self.spent(node, path):
            return INVALID
        if key.kind == "section":
            if not isinstance(node, yaml.MappingNode):
                self.problem(node, path, f"'{path}' must be a mapping of keys")
                return INVALID
            return self.section(node, key.keys, f"{path}.")
        if key.kind == "list":
            return self.string_list(node, path, key)
        if key.kind == "map":
            return self.string_map(node, path)
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, path, f"'{path}' must be a single value, not a "
                         f"{'list' if isinstance(node, yaml.SequenceNode) else 'mapping'}")
            return INVALID
        value = scalar(node)
        if value is None:
            if key.default is None:
                return None
            self.problem(node, path, f"'{path}' is empty: give a value or remove the key")
            return INVALID
        checked = check_scalar(key, value)
        if isinstance(checked, Bad):
            self.problem(node, path, f"'{path}': {checked.message}")
            return INVALID
        return checked

    def string_list(self, node: yaml.Node, path: str, key: Key) -> Any:
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, path, f"'{path}' must be a list")
            return INVALID
        if self.spent(node, path, len(node.value)):
            return INVALID
        items = []
        for item in node.value:
            if not isinstance(item, yaml.ScalarNode) or scalar(item) is None:
                self.problem(item, path, f"'{path}' items must be plain values")
                return INVALID
            why = bad_text(str(item.value))
            if why:
                self.problem(item, path, f"'{path}': item {show(item.value)} {why}")
                return INVALID
            if key.pattern and not re.fullmatch(key.pattern, str(item.value)):
                form = f" ({key.form})" if key.form else ""
                self.problem(item, path, f"'{path}': item {show(item.value)} is not in the "
                             f"expected form{form}")
                return INVALID
            items.append(str(item.value))
        return items

    def string_map(self, node: yaml.Node, path: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, path, f"'{path}' must be a mapping of NAME: value")
            return INVALID
        out = {}
        for key_node, value_node in self.pairs(node, path):
            if not isinstance(key_node, yaml.ScalarNode) or not isinstance(
                    value_node, yaml.ScalarNode):
                self.problem(key_node, path, f"'{path}' entries must be NAME: value")
                return INVALID
            name = str(key_node.value)
            if name in out:
                self.problem(key_node, f"{path}.{name}", f"'{path}.{name}': duplicate key "
                             "(the later value would win)")
                continue
            verdict = check_entry(path, name, str(value_node.value))
            if verdict is not None:
                self.problem(key_node, verdict.setting, verdict.text())
                continue
            why = bad_text(str(value_node.value))
            if why:
                self.problem(value_node, f"{path}.{name}", f"'{path}.{name}': the value {why}")
                continue
            out[name] = str(value_node.value)
            self.config.lines[f"{path}.{name}"] = line_of(key_node)
        return out


def node_range(nnodes: Any) -> tuple[int, int]:
    """(MIN, MAX) of a valid `nnodes` value."""
    checked = rules.node_range(nnodes)
    if isinstance(checked, Verdict):
        raise ValueError(checked.message)
    return checked


def _cross_checks(config: Config) -> None:
    """The launch rules across keys (those `distrun launch` applies too), whether the
    script is there, and the DeepSpeed config the job reads."""
    v, lines = config.resolved(), config.lines

    def add(key: str, message: str, severity: Literal["error", "warning"] = "error") -> None:
        parts = key.split(".")
        line = next((lines[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1))
                     if k in lines), 1)
        config.problems.append(Problem(line, key, message, severity))

    plan = rules.Plan(launcher=v["launcher"], nnodes=node_range(v["nnodes"]),
                      node_rank=v["node_rank"], backend=config.values.get("rdzv", {}).get(
                          "backend"), endpoint=v["rdzv"]["endpoint"], conf=v["rdzv"]["conf"])
    no_address = rules.needs_master_addr(plan, v["master_addr"])
    if no_address is not None:
        add(no_address.setting, f"{no_address.message}: fine under SLURM or a Kubernetes "
            "PyTorchJob (launch reads it from the job); anywhere else "
            f"{no_address.hint}", "warning")
    for verdict in rules.across(plan):
        add(verdict.setting, verdict.text())
    script = v["script"]
    if script and not v["module"]:
        here = Path(config.path).parent
        if not _exists(Path(script)) and not _exists(here / script):
            add("script", f"script {show(script)} does not exist (yet?)", "warning")
    deepspeed_job.check(config, add)
    slurm_export.check(v, add)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        return False
