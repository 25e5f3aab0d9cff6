"""What the probe's parts share inside one rank: the facts file and what was seen so far.

`state` is the rank's `State` once probe.install() has run (None before, outside a
`--check` job, and after a failed install): every hook reads it when it is called, so
a probe that could not be installed leaves the hooks already in place doing nothing.
Also here: where in the user's code a call came from (`user_site`, `from_user`), as
opposed to torch, distrun, the standard library or an installed package.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

_SKIP_PREFIXES = tuple(os.path.join(path, "") for path in (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.dirname(os.path.abspath(torch.__file__)),
    *{sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}))


class State:
    def __init__(self, folder: str, rank: int, steps: int | None,
                 window: int | None = None) -> None:
        path = os.path.join(folder, f"rank{rank}.jsonl")
        self.out = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (kept open)
        self.folder = os.path.abspath(folder)
        self.lock = threading.Lock()
        self.end_after = steps
        self.window = window  # remove the per-step hooks after this many steps
        self.closing = False  # the window is over: unhook at the next chance
        self.undo: list[Callable[[], None]] = []
        self.optimizers: dict[int, Optimizer] = {}
        self.loaders: weakref.WeakKeyDictionary[Any, Loader] = weakref.WeakKeyDictionary()
        self.iterators: weakref.WeakKeyDictionary[Any, Iteration] = (
            weakref.WeakKeyDictionary())
        self.sites: dict[str, int] = {}
        self.current: Iteration | None = None
        self.written: set[str] = set()
        self.group = False
        self.ended = False  # the end facts are written (once)
        self.pid = os.getpid()

    def fact(self, kind: str, **values: object) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker: not this rank's facts
            return
        with self.lock:
            self.out.write(json.dumps({"kind": kind, **values}) + "\n")

    def unhook(self) -> None:
        """The window is over: every per-step hook is taken out (torch's own methods back
        on the DataLoader classes, the optimizer hook removed)."""
        undo, self.undo = self.undo, []
        for step in reversed(undo):
            step()


class Optimizer:
    def __init__(self, index: int) -> None:
        self.index = index
        self.steps = 0
        self.names: list[str] | None = None
        self.params: list[torch.Tensor] | None = None  # the model's, when ZeRO shards these


class Loader:
    def __init__(self, site: str, number: int) -> None:
        self.site = site
        self.number = number  # loaders made at the same line: 0, 1, 2...
        self.seen_first = False
        self.train = False
        self.content: str | None = None  # under a DistributedSampler: probe_loaders._content
        self.content_read = False


class Iteration:
    def __init__(self, loader: Loader, epoch: int | None, shuffle: bool) -> None:
        self.loader = loader
        self.epoch = epoch
        self.shuffle = shuffle
        self.trained = False


state: State | None = None


# -- where in the user's code ---------------------------------------------------------


def user_site(depth: int = 2) -> str:
    """file:line of the innermost caller that is the user's code (not torch, distrun, the
    standard library or an installed package)."""
    frame: FrameType | None
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return "?"
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not name.startswith(_SKIP_PREFIXES):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def from_user(frame: FrameType | None) -> bool:
    """Whether `frame` (the caller of torch.save) is the user's code: DeepSpeed's and
    torch's own checkpoint code saves shards by design."""
    if frame is None:
        return False
    name = frame.f_code.co_filename
    return not name.startswith("<") and not name.startswith(_SKIP_PREFIXES)
