"""The probe's collectives wrapper: the last collective each rank entered, for hang reports.

`watch_collectives` wraps each of torch.distributed's collectives (COLLECTIVES) with a
counter; the last call is kept in `coll<RANK>`, a small memory-mapped record in the check
folder, that distrun reads (waits.py) when a job goes quiet. Kept for the whole run, not
only the default check's window: it costs a counter and a write to memory per call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch

from distrun.check import probe_state
from distrun.check.probe_state import user_site

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "barrier", "all_to_all",
               "all_to_all_single", "gather", "scatter", "all_gather_object",
               "broadcast_object_list", "gather_object", "scatter_object_list", "send",
               "recv", "monitored_barrier")
RECORD = 512  # bytes of coll<RANK>: the last collective, as one JSON line


class Collectives:
    """The script's calls of torch.distributed's collectives, counted; the last one is
    kept in a small memory-mapped file (`coll<RANK>`: sequence number, name, shape and
    dtype of its tensor, the script's line, whether it returned) that distrun reads when
    a job goes quiet. Costs a counter and a write to memory per collective; kept for the
    whole run (not only the window)."""

    def __init__(self, folder: str, rank: int) -> None:
        import mmap

        path = os.path.join(folder, f"coll{rank}")
        with open(path, "wb") as stream:
            stream.write(b" " * RECORD)
        self.stream = open(path, "r+b")  # noqa: SIM115 (kept open)
        self.map = mmap.mmap(self.stream.fileno(), RECORD)
        self.seq = 0

    def enter(self, record: dict[str, object]) -> None:
        """The record, its state first and "in " (3 bytes: `returned` overwrites them)."""
        data = json.dumps({"state": "in ", **record}).encode()[:RECORD - 1]
        self.map[:RECORD] = data.ljust(RECORD - 1) + b"\n"

    def returned(self) -> None:
        self.map[STATE:STATE + 3] = b"out"


STATE = len('{"state": "')  # where the state's 3 bytes are in the record


def watch_collectives(module: Any) -> None:
    state = probe_state.state
    if state is None:
        return
    watch = Collectives(state.folder, int(os.environ.get("RANK", 0)))
    for name in COLLECTIVES:
        function = getattr(module, name, None)
        if callable(function):
            setattr(module, name, counted(watch, name, function))


def counted(watch: Collectives, name: str, function: Callable[..., Any]
            ) -> Callable[..., Any]:
    def collective(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() != _pid:  # a forked worker: not this rank's
            return function(*args, **kwargs)
        watch.seq += 1
        seq = watch.seq
        tensor = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)),
                      None)
        if tensor is None:
            listed = next((a for a in args if isinstance(a, list) and a
                           and isinstance(a[0], torch.Tensor)), None)
            tensor = listed[0] if listed else None
        shape = list(tensor.shape) if tensor is not None else None
        dtype = str(tensor.dtype).removeprefix("torch.") if tensor is not None else None
        watch.enter({"seq": seq, "op": name, "shape": shape, "dtype": dtype,
                     "site": user_site(2)})
        result = function(*args, **kwargs)
        watch.returned()
        return result

    collective.__wrapped__ = function  # type: ignore[attr-defined]
    collective.__doc__ = function.__doc__
    collective.__name__ = name
    return collective


_pid = os.getpid()
