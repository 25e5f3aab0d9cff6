"""What the descriptor's DISTRUN_SHIM_MAIN_GLOBALS rebinds in demo.py, the file unchanged:
`get_net` becomes a maker that records the `Net` it returns (nets.Net: not an nn.Module,
it holds the classifier as `.clf`, made anew by every `Net.train`). demo.py saves no
model; at exit the process of rank 0 saves the last round's classifier,
`{"clf": state_dict}`, to al_model.pt in its folder (a DDP wrapper, should `.clf` be one,
unwrapped)."""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable
from typing import Any

_made: list[Any] = []


def keep(get_net: Callable[..., Any]) -> Callable[..., Any]:
    def kept(*args: Any, **kwargs: Any) -> Any:
        net = get_net(*args, **kwargs)
        _made.append(net)
        return net

    return kept


@atexit.register
def _save_last() -> None:
    if not _made or int(os.environ.get("RANK", "0")) != 0:
        return
    import torch

    clf = _made[-1].clf
    clf = getattr(clf, "module", clf)
    torch.save({"clf": clf.state_dict()}, "al_model.pt")
