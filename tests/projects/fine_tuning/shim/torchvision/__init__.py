"""The shared shim's torchvision (datasets, transforms, utils: this package's `__path__`
continues in the next `torchvision` folder on sys.path, the shared shim's) with this
project's `torchvision.models` first (a small `alexnet` stand-in), and an ImageFolder
that finds config.py's absolute data folder in the run folder.

config.py (upstream, verbatim) hard-codes `aug_base = '/home/bumsoo/Data/split/' + name`:
with `DISTRUN_SHIM_DATA_REDIRECT=FROM=TO`, an ImageFolder root under FROM is read under
TO instead (TO relative to the working directory: the run folder's data, made by the
descriptor's set-up). Nothing else of the shared ImageFolder changes."""

import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
for _p in _sys.path:
    _cand = _os.path.join(_os.path.abspath(_p or "."), "torchvision")
    if _cand != _here and _os.path.isfile(_os.path.join(_cand, "__init__.py")):
        __path__.append(_cand)
        break

from . import datasets, transforms, utils  # noqa: E402,F401

__version__ = "0.0.0+distrun.shim"

_SharedImageFolder = datasets.ImageFolder


def _redirected(root):
    spec = _os.environ.get("DISTRUN_SHIM_DATA_REDIRECT", "")
    if "=" not in spec:
        return root
    source, target = spec.split("=", 1)
    root = _os.fspath(root)
    if root == source or root.startswith(source.rstrip("/") + "/"):
        return _os.path.join(target, _os.path.relpath(root, source))
    return root


class ImageFolder(_SharedImageFolder):
    def __init__(self, root, *args, **kwargs):
        super().__init__(_redirected(root), *args, **kwargs)


datasets.ImageFolder = ImageFolder
