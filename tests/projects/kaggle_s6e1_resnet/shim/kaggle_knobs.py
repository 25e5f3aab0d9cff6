"""What the descriptor's DISTRUN_SHIM_MAIN_GLOBALS rebinds in s6e1_v45_resnet.py, the file
unchanged: `TabularResNet` becomes a subclass that records every instance made (one per
fold). The script keeps no model at the end (`del model` after each fold, the best epoch's
weights only in a dict) and saves none; at exit the process of rank 0 saves the last
fold's model, `{"model": state_dict}`, to last_fold_model.pt in its folder: after
`model.load_state_dict(best_state)`, the weights its OOF and test predictions came from."""

from __future__ import annotations

import atexit
import os
from typing import Any

_made: list[Any] = []


def keep_last(cls: type) -> type:
    class Kept(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _made.append(self)

    Kept.__name__ = cls.__name__
    Kept.__qualname__ = cls.__qualname__
    return Kept


@atexit.register
def _save_last() -> None:
    if not _made or int(os.environ.get("RANK", "0")) != 0:
        return
    import torch

    torch.save({"model": _made[-1].state_dict()}, "last_fold_model.pt")
