"""YAML text to nodes, safely: line numbers kept, nothing constructed, the work bounded.

The text is composed into nodes only (no Python object is built from a tag) and a tag
other than YAML's plain types (`!!python/object`, `!custom`...) is noted as refused. The
input is bounded: 20,000 nodes, 100 levels of nesting (a deeper or larger file is
refused with the line where it went over). `scalar` reads a plain value from its
resolved tag, constructing nothing else.
"""

from __future__ import annotations

from typing import Any

import yaml

from distrun.launch_rules import clip

MAX_NODES = 20_000
MAX_DEPTH = 100
MAX_PROBLEMS = 100
YAML_TAG = "tag:yaml.org,2002:"
MERGE = f"{YAML_TAG}merge"
# Tags a config may carry (explicitly or as YAML resolves plain values); no other is built.
_ALLOWED_TAGS = frozenset(f"{YAML_TAG}{name}" for name in (
    "null", "bool", "int", "float", "str", "timestamp", "value", "merge", "seq", "map"))
_NULLS = ("", "~", "null")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


class Refused(Exception):
    """The text is not a config at all (too many values, nested too deep), at `line`."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


class Loader(yaml.SafeLoader):
    """Composes nodes only: counts them, bounds the nesting, notes tags it will not read
    (`refused`: line and message of each)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0
        self.nodes = 0
        self.refused: list[tuple[int, str]] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
        self.nodes += 1  # aliases too: each one is work for the parser
        if self.nodes > MAX_NODES:
            raise Refused(line, f"more than {MAX_NODES:,} values: not a config")
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        if self.depth >= MAX_DEPTH:
            raise Refused(line, f"nested more than {MAX_DEPTH} levels deep: not a config")
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is not None and node.tag not in _ALLOWED_TAGS and len(self.refused) < MAX_PROBLEMS:
            tag = node.tag.replace(YAML_TAG, "!!", 1)
            self.refused.append((line_of(node), f"tag {show_text(tag)} is not allowed: a "
                                 "config holds plain values only (nothing is constructed "
                                 "from tags)"))
        return node


def compose(text: str) -> tuple[yaml.Node | None, list[tuple[int, str]]]:
    """The root node of `text` (None: an empty document), or the reasons, with their
    lines, why it is not a config."""
    loader: Loader | None = None
    try:
        loader = Loader(text)  # it checks every character is printable
        root = loader.get_single_node()
    except Refused as err:
        return None, [(err.line, err.message)]
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        return None, [(mark.line + 1 if mark is not None else 1,
                       f"YAML syntax error: {yaml_problem(err)}")]
    except yaml.reader.ReaderError as err:
        return None, [(text.count("\n", 0, err.position) + 1,
                       f"YAML error: character {err.character!r} is not allowed in YAML")]
    except yaml.YAMLError as err:
        return None, [(1, f"YAML error: {clip(str(err), 200)}")]
    finally:
        if loader is not None:
            loader.dispose()
    return root, loader.refused


def show_text(value: str) -> str:
    return clip(repr(value))


def yaml_problem(err: yaml.MarkedYAMLError) -> str:
    problem = str(err.problem)
    if err.context and err.context_mark is not None:
        problem = f"{err.context} (line {err.context_mark.line + 1}): {problem}"
    return clip(problem, 200)


def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def key_id(key_node: yaml.Node) -> object:
    """What makes two keys the same: a plain key's text; any other key is its own."""
    return key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)


def scalar(node: yaml.ScalarNode) -> Any:
    """The value of a scalar from its resolved YAML tag, constructing nothing else. Text
    that does not fit its tag (`!!bool maybe`, `!!int abc`) stays text."""
    tag, text = node.tag, str(node.value)
    if tag == f"{YAML_TAG}null" and text.lower() in _NULLS:
        return None
    if tag == f"{YAML_TAG}bool" and text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    if tag == f"{YAML_TAG}int":
        try:
            return int(text.replace("_", ""), 0)
        except ValueError:  # not a number, or more than Python's 4,300 digits
            return text
    if tag == f"{YAML_TAG}float":
        number = text.replace("_", "").lower()
        try:  # YAML writes infinity and not-a-number .inf and .nan
            return float(number.replace(".inf", "inf").replace(".nan", "nan"))
        except ValueError:
            return text
    return text
