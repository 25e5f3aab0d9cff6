"""The shared shim's torchvision (datasets, transforms, utils: this package's `__path__`
continues in the next `torchvision` folder on sys.path, the shared shim's) with this
project's `torchvision.models` first (`models.detection`: a small Faster R-CNN stand-in)
and `datasets.CocoDetection` (baseline/coco_utils.py subclasses it at import; unused).

Also: `torch.cuda.synchronize()` does nothing when CUDA is not available. engine.py's
evaluate() calls it unguarded before each forward pass (a GPU tutorial's timing); on a
CPU-only torch it raises "Torch not compiled with CUDA enabled", in the original run as
in the converted one alike."""

import os as _os
import sys as _sys

import torch as _torch

_here = _os.path.dirname(_os.path.abspath(__file__))
for _p in _sys.path:
    _cand = _os.path.join(_os.path.abspath(_p or "."), "torchvision")
    if _cand != _here and _os.path.isfile(_os.path.join(_cand, "__init__.py")):
        __path__.append(_cand)
        break

from . import datasets, models, transforms, utils  # noqa: E402,F401

if not hasattr(datasets, "CocoDetection"):
    class CocoDetection(_torch.utils.data.Dataset):
        def __init__(self, root, annFile, *args, **kwargs):
            raise RuntimeError("the projects' shim has no torchvision.datasets.CocoDetection")

    datasets.CocoDetection = CocoDetection

if not _torch.cuda.is_available():
    _torch.cuda.synchronize = lambda device=None: None

__version__ = "0.0.0+distrun.shim"
