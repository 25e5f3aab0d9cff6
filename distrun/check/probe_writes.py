"""The probe's watch on files: the `write` and `sharded-save` facts.

Every file opened for writing is seen by an audit hook on the `open` event (`audit`,
installed with sys.addaudithook: it stays for the whole run, a cost paid per open, not
per step) and by the wrapper of `torch.save` (`recording_save`); each is written down once
with the script line that opened it (the probe's own folder, /dev, /proc, caches and
locks aside). A `torch.save` called from the user's code of a tensor that is only this
rank's part (a DTensor, a ZeRO-3 partitioned parameter, or a state dict or module holding
one) is a `sharded-save`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from distrun.check import probe_state
from distrun.check.probe_state import from_user, user_site

_NOT_WRITES = ("/dev/", "/proc/", "/sys/")
_CACHES = ("/.cache/", "/__pycache__/", "/torchinductor_", "/.triton/")


def recording_save(save: Callable[..., Any]) -> Callable[..., Any]:
    def saved(obj: object, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)):
            _written(os.fspath(f))
        state = probe_state.state
        if state is not None and os.getpid() == state.pid and from_user(sys._getframe(1)):
            try:
                shard = _shard_in(obj)
            except Exception:  # noqa: BLE001 (an object the probe cannot look into)
                shard = None
            if shard is not None:
                state.fact("sharded-save", site=user_site(2), what=shard[0], name=shard[1],
                           path=os.fspath(f) if isinstance(f, (str, os.PathLike)) else "")
        return save(obj, f, *args, **kwargs)

    saved.__wrapped__ = save  # type: ignore[attr-defined]
    saved.__doc__ = save.__doc__
    return saved


def _shard_in(obj: object, depth: int = 0) -> tuple[str, str] | None:
    """("dtensor" | "zero3", where) when `obj` is, or holds (a module's parameters, a
    dict or list of them, three levels deep), a tensor that is only this rank's part: a
    DTensor (FSDP2, tensor parallel) or a ZeRO-3 partitioned parameter or its empty
    state-dict entry."""
    if isinstance(obj, torch.Tensor):
        if getattr(obj, "placements", None) is not None:
            return "dtensor", ""
        whole = getattr(obj, "ds_numel", None)
        if whole is not None and obj.numel() != whole:
            return "zero3", ""
        if obj.numel() == 0 and "deepspeed.runtime.zero.partition_parameters" in sys.modules:
            return "zero3", ""
        return None
    if depth >= 3:
        return None
    items: list[tuple[str, object]]
    if isinstance(obj, torch.nn.Module):
        items = list(obj.named_parameters())
    elif isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    else:
        return None
    for key, value in items:
        found = _shard_in(value, depth + 1)
        if found is not None:
            return found[0], f"{key}.{found[1]}" if found[1] else key
    return None


def audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or probe_state.state is None:
        return
    path, mode, flags = args
    if isinstance(mode, str):
        writing = any(c in mode for c in "wax+")
    else:
        writing = bool((flags or 0) & (os.O_WRONLY | os.O_RDWR))
    if writing and isinstance(path, (str, bytes, os.PathLike)):
        _written(os.fsdecode(path))


def _written(path: str) -> None:
    state = probe_state.state
    if state is None or os.getpid() != state.pid:
        return
    full = os.path.abspath(path)
    if (full in state.written or full.startswith(state.folder) or full.startswith(_NOT_WRITES)
            or any(part in full for part in _CACHES) or full.endswith((".pyc", ".lock"))):
        return
    state.written.add(full)
    state.fact("write", path=full, site=user_site(3))
