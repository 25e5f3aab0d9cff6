"""Reading distrun.yaml: every problem at once, each with its line and key.

The YAML is composed into nodes (which carry line numbers), then checked key by key
against `schema.KEYS`, then across keys. Nothing is executed or constructed from tags, and
a tag other than YAML's plain types (`!!python/object`, `!custom`...) is refused. The input
is bounded: 1 MiB, 20,000 nodes, 100 levels of nesting; aliases and merge keys (`<<`) are
followed with a budget, so a "billion laughs" file is refused, not expanded.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from distrun.config.schema import KEYS, NPROC_WORDS, Key, defaults
from distrun.errors import InputError

MAX_BYTES = 1 << 20
MAX_NODES = 20_000
MAX_DEPTH = 100
MAX_PROBLEMS = 100
DEFAULT_FILE = "distrun.yaml"
_YAML = "tag:yaml.org,2002:"
_MERGE = f"{_YAML}merge"
# Tags a config may carry (explicitly or as YAML resolves plain values); no other is built.
_ALLOWED_TAGS = frozenset(f"{_YAML}{name}" for name in (
    "null", "bool", "int", "float", "str", "timestamp", "value", "merge", "seq", "map"))
_NULLS = ("", "~", "null")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


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
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # it checks every character is printable
        root = loader.get_single_node()
    except _Refused as err:
        config.problems.append(Problem(err.line, "", err.message))
        return config
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else 1
        config.problems.append(Problem(line, "", f"YAML syntax error: {_yaml_problem(err)}"))
        return config
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        config.problems.append(Problem(line, "", f"YAML error: character {err.character!r} "
                                       "is not allowed in YAML"))
        return config
    except yaml.YAMLError as err:
        config.problems.append(Problem(1, "", f"YAML error: {_clip(str(err), 200)}"))
        return config
    finally:
        if loader is not None:
            loader.dispose()
    if loader.refused:
        config.problems.extend(loader.refused)
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
    if len(config.problems) > MAX_PROBLEMS:
        rest = config.problems[MAX_PROBLEMS:]
        config.problems[MAX_PROBLEMS:] = [Problem(
            rest[0].line, "", f"{len(rest)} more problem(s) not listed", rest[0].severity)]
    return config


class _Refused(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


class _Loader(yaml.SafeLoader):
    """Composes nodes only: counts them, bounds the nesting, notes tags it will not read."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0
        self.nodes = 0
        self.refused: list[Problem] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
        self.nodes += 1  # aliases too: each one is work for the parser
        if self.nodes > MAX_NODES:
            raise _Refused(line, f"more than {MAX_NODES:,} values: not a config")
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        if self.depth >= MAX_DEPTH:
            raise _Refused(line, f"nested more than {MAX_DEPTH} levels deep: not a config")
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is not None and node.tag not in _ALLOWED_TAGS and len(self.refused) < MAX_PROBLEMS:
            tag = node.tag.replace(_YAML, "!!", 1)
            self.refused.append(Problem(_line(node), "", f"tag {_show(tag)} is not allowed: "
                                        "a config holds plain values only (nothing is "
                                        "constructed from tags)"))
        return node


def _yaml_problem(err: yaml.MarkedYAMLError) -> str:
    problem = str(err.problem)
    if err.context and err.context_mark is not None:
        problem = f"{err.context} (line {err.context_mark.line + 1}): {problem}"
    return _clip(problem, 200)


def _clip(text: str, limit: int = 60) -> str:
    """Text for a message: printable (lone surrogates escaped), never too long."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-2:]}"


def _show(value: Any) -> str:
    """A value for a message, as Python writes it (quoted, escaped), clipped."""
    try:
        return _clip(repr(value))
    except ValueError:  # an integer of more than 4,300 digits (written in hex)
        return "a number of more than 4,300 digits"


def _bad_text(text: str) -> str | None:
    """Why `text` cannot be passed to a process (argv, environment, path), if it cannot."""
    if "\0" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    return None


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Checker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.budget = MAX_NODES

    def problem(self, node: yaml.Node, key: str, message: str) -> None:
        self.config.problems.append(Problem(_line(node), key, message))

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
            if key_node.tag != _MERGE:
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
                        merged.setdefault(_key_id(entry[0]), entry)
        names = {_key_id(key_node) for key_node, _ in written}
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
            path = f"{prefix}{_clip(name, 200)}"
            if name in seen:
                self.problem(key_node, path, "duplicate key (the later value would win)")
            seen.add(name)
            if name not in keys:
                hint = difflib.get_close_matches(name, list(keys), n=1)
                suffix = f"; did you mean '{prefix}{hint[0]}'?" if hint else ""
                self.problem(key_node, path, f"unknown key '{_clip(path)}'{suffix}")
                continue
            self.config.lines[path] = _line(key_node)
            value = self.value(value_node, keys[name], path)
            if value is not _INVALID:
                out[name] = value
        return out

    def value(self, node: yaml.Node, key: Key, path: str) -> Any:
        if self.spent(node, path):
            return _INVALID
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
        if self.spent(node, path, len(node.value)):
            return _INVALID
        items = []
        for item in node.value:
            if not isinstance(item, yaml.ScalarNode) or _scalar(item) is None:
                self.problem(item, path, f"'{path}' items must be plain values")
                return _INVALID
            why = _bad_text(str(item.value))
            if why:
                self.problem(item, path, f"'{path}': item {_show(item.value)} {why}")
                return _INVALID
            items.append(str(item.value))
        return items

    def string_map(self, node: yaml.Node, path: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, path, f"'{path}' must be a mapping of NAME: value")
            return _INVALID
        out = {}
        for key_node, value_node in self.pairs(node, path):
            if not isinstance(key_node, yaml.ScalarNode) or not isinstance(
                    value_node, yaml.ScalarNode):
                self.problem(key_node, path, f"'{path}' entries must be NAME: value")
                return _INVALID
            name = str(key_node.value)
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                what = "environment variable name" if path == "env" else "setting name"
                self.problem(key_node, f"{path}.{_clip(name, 200)}",
                             f"{_show(name)} is not a valid {what}")
                continue
            why = _bad_text(str(value_node.value))
            if why:
                self.problem(value_node, f"{path}.{name}", f"'{path}.{name}': the value {why}")
                continue
            out[name] = str(value_node.value)
            self.config.lines[f"{path}.{name}"] = _line(key_node)
        return out


def _key_id(key_node: yaml.Node) -> object:
    """What makes two keys the same: a plain key's text; any other key is its own."""
    return key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)


class _Bad:
    def __init__(self, message: str) -> None:
        self.message = message


_INVALID = object()


def _scalar(node: yaml.ScalarNode) -> Any:
    """The value of a scalar from its resolved YAML tag, constructing nothing else. Text
    that does not fit its tag (`!!bool maybe`, `!!int abc`) stays text."""
    tag, text = node.tag, str(node.value)
    if tag == f"{_YAML}null" and text.lower() in _NULLS:
        return None
    if tag == f"{_YAML}bool" and text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    if tag == f"{_YAML}int":
        try:
            return int(text.replace("_", ""), 0)
        except ValueError:  # not a number, or more than Python's 4,300 digits
            return text
    if tag == f"{_YAML}float":
        number = text.replace("_", "").lower()
        try:  # YAML writes infinity and not-a-number .inf and .nan
            return float(number.replace(".inf", "inf").replace(".nan", "nan"))
        except ValueError:
            return text
    return text


def _check_scalar(key: Key, value: Any) -> Any:
    if key.kind == "bool":
        return value if isinstance(value, bool) else _Bad(
            f"expected true or false, got {_show(value)}")
    if key.kind in ("int", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                key.kind == "int" and not isinstance(value, int)):
            return _Bad(f"expected {'an integer' if key.kind == 'int' else 'a number'}, "
                        f"got {_show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            return _Bad(f"expected a finite number, got {value}")
        if abs(value) >= 2 ** 63:  # more than the tools downstream hold (64-bit integers)
            return _Bad(f"{_show(value)} is too large")
        return _range(key, value)
    if key.kind == "nnodes":
        return _nnodes(key, value)
    if key.kind == "nproc":
        if isinstance(value, int) and not isinstance(value, bool):
            return _count(key, value)
        if value in NPROC_WORDS:
            return value
        return _Bad(f"expected a number or one of {', '.join(NPROC_WORDS)}, got {_show(value)}")
    if isinstance(value, bool):
        return _Bad(f"expected text, got {str(value).lower()} (quote it)")
    text = str(value)
    why = _bad_text(text)
    if why:
        return _Bad(f"{_show(text)} {why}")
    if key.choices and text not in key.choices:
        hint = difflib.get_close_matches(text, key.choices, n=1)
        more = f"; did you mean '{hint[0]}'?" if hint else ""
        return _Bad(f"{_show(text)} is not one of {', '.join(key.choices)}{more}")
    if key.pattern and not re.fullmatch(key.pattern, text):
        return _Bad(f"{_show(text)} is not in the expected form")
    return text


def _range(key: Key, value: float) -> Any:
    if key.minimum is not None and value < key.minimum:
        return _Bad(f"{_show(value)} is below the minimum {key.minimum:g}")
    if key.maximum is not None and value > key.maximum:
        return _Bad(f"{_show(value)} is above the maximum {key.maximum:g}")
    return value


def _count(key: Key, value: int) -> Any:
    return _range(key, value) if value >= 1 else _Bad("must be at least 1")


def _nnodes(key: Key, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return _count(key, value)
    match = re.fullmatch(r"(\d{1,9}):(\d{1,9})", str(value))
    if match and int(match[1]) <= int(match[2]):
        checked = [_count(key, int(match[1])), _count(key, int(match[2]))]
        return next((c for c in checked if isinstance(c, _Bad)), str(value))
    return _Bad(f"expected N or MIN:MAX with 1 <= MIN <= MAX, got {_show(value)}")


def node_range(nnodes: Any) -> tuple[int, int]:
    if isinstance(nnodes, int):
        return nnodes, nnodes
    low, _, high = str(nnodes).partition(":")
    return int(low), int(high or low)


def _cross_checks(config: Config) -> None:
    v, lines = config.resolved(), config.lines

    def add(key: str, message: str, severity: Literal["error", "warning"] = "error") -> None:
        parts = key.split(".")
        line = next((lines[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1))
                     if k in lines), 1)
        config.problems.append(Problem(line, key, message, severity))

    low, high = node_range(v["nnodes"])
    rdzv = v["rdzv"]
    c10d = rdzv["backend"] == "c10d" or bool(rdzv["endpoint"])
    if high > 1 and not c10d and not v["master_addr"]:
        add("nnodes", f"nnodes {v['nnodes']} without master_addr: fine under SLURM or a "
            "Kubernetes PyTorchJob (launch reads node 0's address from the job); anywhere else "
            "set master_addr (node 0's address) or rdzv.endpoint", "warning")
    if low != high and not c10d:
        add("nnodes", f"nnodes {v['nnodes']} is elastic: set rdzv.endpoint (c10d rendezvous)")
    if rdzv["conf"] and not c10d:
        add("rdzv.conf", "rdzv.conf applies to the c10d rendezvous: set rdzv.endpoint")
    for name, value in rdzv["conf"].items():
        if not value or re.search(r"[,=\s]", value):
            add(f"rdzv.conf.{name}", f"rdzv.conf.{name}: {value!r} is not a plain value "
                "(no commas, '=' or spaces)")
    if rdzv["backend"] == "c10d" and not rdzv["endpoint"]:
        add("rdzv.backend", "rdzv.backend c10d needs rdzv.endpoint (HOST:PORT)")
    if rdzv["endpoint"] and not re.fullmatch(r"[^:\s]+(:\d{1,5})?", str(rdzv["endpoint"])):
        add("rdzv.endpoint", f"rdzv.endpoint {_show(rdzv['endpoint'])} is not HOST:PORT")
    if not c10d and not 0 <= v["node_rank"] < high:
        add("node_rank", f"node_rank {_show(v['node_rank'])} is outside 0..{high - 1} "
            f"(nnodes {v['nnodes']})")
    if v["launcher"] == "accelerate" and low != high:
        add("launcher", "accelerate cannot run an elastic job (nnodes MIN:MAX)")
    script = v["script"]
    if script and not v["module"]:
        here = Path(config.path).parent
        if not _exists(Path(script)) and not _exists(here / script):
            add("script", f"script {_show(script)} does not exist (yet?)", "warning")


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        return False
