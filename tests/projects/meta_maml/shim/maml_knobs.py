"""Shrinks dragen1860/MAML-Pytorch's miniimagenet_train.py for a CPU run, through
DISTRUN_SHIM_MAIN_GLOBALS (the upstream files unchanged): main() hard-codes the data
folder ('/home/i/tmp/MAML-Pytorch/miniimagenet/') and the number of episodes each
MiniImagenet draws in its constructor (10000 for training, 100 for the test), and keeps
the meta-learner in a local (`maml`), so that the shim's capture cannot see it."""

from __future__ import annotations

import os
import sys
from typing import Any


def mini(cls: type) -> Any:
    """`MiniImagenet(root, mode=..., batchsz=...)` reading ./miniimagenet/ and drawing
    MAML_SHIM_TRAIN_TASKS / MAML_SHIM_TEST_TASKS episodes."""

    def make(root: str, mode: str, batchsz: int, **kwargs: Any) -> Any:
        batchsz = int(os.environ[f"MAML_SHIM_{mode.upper()}_TASKS"])
        return cls("miniimagenet/", mode=mode, batchsz=batchsz, **kwargs)

    return make


def kept(cls: type) -> Any:
    """`Meta(args, config)` also bound in `__main__` as `maml` (the meta-learner: its
    Learner's weights and running statistics), for DISTRUN_SHIM_CAPTURE."""

    def make(*args: Any, **kwargs: Any) -> Any:
        meta = cls(*args, **kwargs)
        sys.modules["__main__"].maml = meta
        return meta

    return make
