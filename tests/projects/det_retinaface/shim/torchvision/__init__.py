"""The shared shim's torchvision (datasets, transforms, utils: this package's `__path__`
continues in the next `torchvision` folder on sys.path, the shared shim's) with this
project's `torchvision.models` first: `models._utils.IntermediateLayerGetter` (what
RetinaFace builds its body with) and `models.detection.backbone_utils` (imported, never
used)."""

import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
for _p in _sys.path:
    _cand = _os.path.join(_os.path.abspath(_p or "."), "torchvision")
    if _cand != _here and _os.path.isfile(_os.path.join(_cand, "__init__.py")):
        __path__.append(_cand)
        break

from . import datasets, models, transforms, utils  # noqa: E402,F401

__version__ = "0.0.0+distrun.shim"
