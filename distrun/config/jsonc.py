"""Reading JSON as people write DeepSpeed configs: with `//` and `/* */` comments and
trailing commas, each value with its line, duplicate keys kept (so they can be named).

DeepSpeed reads its config with hjson, which accepts comments; `json.load` does not. This
reader accepts what both agree on plus comments and trailing commas, and counts what it
accepted beyond JSON. Anything else is refused with its line and column. Bounded like the
YAML reader: the caller limits the size; nesting stops at MAX_DEPTH.
"""

from __future__ import annotations

import json
import json.decoder
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

MAX_DEPTH = 100
T = TypeVar("T")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/|#[^\n]*)*", re.DOTALL)
_WORDS = {"true": True, "false": False, "null": None}
# json's own string scanner (escapes, control characters): in the module, not in its stubs
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


@dataclass
class Node:
    """A value and the line it starts on; an object's members keep their order and their
    duplicates, each with its key's line."""

    value: Any  # a plain value, a list of Node, or a list of Member
    line: int
    kind: str  # "object", "array", "string", "number", "word"


@dataclass
class Member:
    key: str
    line: int
    node: Node


@dataclass
class Parsed:
    root: Node
    comments: list[int] = field(default_factory=list)  # lines of comments
    trailing_commas: list[int] = field(default_factory=list)


class JsonError(ValueError):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


def parse(text: str) -> Parsed:
    reader = _Reader(text)
    root = reader.value(0)
    reader.space()
    if reader.pos < len(text):
        reader.fail("extra text after the end of the JSON value")
    return Parsed(root, reader.comments, reader.trailing)


def plain(node: Node) -> Any:
    """The node as plain Python values (a duplicated key: its last value, as json does)."""
    if node.kind == "object":
        return {m.key: plain(m.node) for m in node.value}
    if node.kind == "array":
        return [plain(n) for n in node.value]
    return node.value


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.comments: list[int] = []
        self.trailing: list[int] = []

    def line(self, pos: int | None = None) -> int:
        return self.text.count("\n", 0, self.pos if pos is None else pos) + 1

    def fail(self, message: str) -> NoReturn:
        start = self.text.rfind("\n", 0, self.pos) + 1
        raise JsonError(message, self.line(), self.pos - start + 1)

    def space(self) -> None:
        match = _SPACE.match(self.text, self.pos)
        assert match is not None
        for comment in re.finditer(r"//|/\*|#", match.group()):
            self.comments.append(self.line(self.pos + comment.start()))
        if self.text.startswith("/*", match.end()):
            self.pos = match.end()
            self.fail("a /* comment that is never closed")
        self.pos = match.end()

    def value(self, depth: int) -> Node:
        if depth > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels")
        self.space()
        line, char = self.line(), self.text[self.pos:self.pos + 1]
        if char == "{":
            return Node(self.members(depth), line, "object")
        if char == "[":
            return Node(self.items(depth), line, "array")
        if char == '"':
            return Node(self.string(), line, "string")
        number = _NUMBER.match(self.text, self.pos)
        if number:
            self.pos = number.end()
            text = number.group()
            return Node(float(text) if any(c in text for c in ".eE") else int(text), line,
                        "number")
        for word, meaning in _WORDS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return Node(meaning, line, "word")
        self.fail("expected a value (a string in double quotes, a number, true, false, "
                  "null, an object or an array)" if char else "the file ends before its value")

    def string(self) -> str:
        try:
            text, self.pos = _scanstring(self.text, self.pos + 1)
        except json.JSONDecodeError as err:
            self.pos = err.pos
            self.fail(err.msg.lower())
        return str(text)

    def members(self, depth: int) -> list[Member]:
        return self.sequence("}", "members", lambda: self.member(depth))

    def member(self, depth: int) -> Member:
        if not self.text.startswith('"', self.pos):
            self.fail("expected a key in double quotes")
        line = self.line()
        key = self.string()
        self.space()
        self.expect(":", f"a colon after the key {key!r}")
        return Member(key, line, self.value(depth + 1))

    def items(self, depth: int) -> list[Node]:
        return self.sequence("]", "items", lambda: self.value(depth + 1))

    def sequence(self, close: str, what: str, read: Callable[[], T]) -> list[T]:
        """The entries of an object or array, up to `close` (a trailing comma counted)."""
        self.pos += 1
        entries: list[T] = []
        while True:
            self.space()
            if self.text.startswith(close, self.pos):
                self.pos += 1
                return entries
            if entries:
                self.expect(",", f"a comma between {what} (or the closing {close})")
                self.space()
                if self.text.startswith(close, self.pos):
                    self.trailing.append(self.line())
                    self.pos += 1
                    return entries
            entries.append(read())

    def expect(self, char: str, what: str) -> None:
        if not self.text.startswith(char, self.pos):
            self.fail(f"expected {what}")
        self.pos += 1
