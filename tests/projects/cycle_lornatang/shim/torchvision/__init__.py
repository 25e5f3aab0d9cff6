"""The shared shim's torchvision (datasets, transforms, utils: this package's `__path__`
continues in the next `torchvision` folder on sys.path, the shared shim's) with one
change for this project: `transforms.RandomCrop(size)` cuts the centre `size` out of a
larger image instead of leaving it whole. Lornatang's train.py resizes to
`int(image_size * 1.12)` and then crops `image_size` at random: the shared shim's
no-op crop would hand the generator 35 x 35 images for `--image-size 32`, which its two
stride-2 convolutions and two transposed ones give back as 36 x 36 (the cycle loss then
fails on the shapes). A centre crop is deterministic, as the shared shim's other random
transforms are (RandomResizedCrop is a plain resize)."""

import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
for _p in _sys.path:
    _cand = _os.path.join(_os.path.abspath(_p or "."), "torchvision")
    if _cand != _here and _os.path.isfile(_os.path.join(_cand, "__init__.py")):
        __path__.append(_cand)
        break

from . import datasets, models, transforms, utils  # noqa: E402,F401


class _CentreCrop:
    """RandomCrop(size, padding=None, ...) as a centre crop (padding: none here)."""

    def __init__(self, size, *args, **kwargs):
        self.size = transforms._pair(size)

    def __call__(self, img):
        return transforms.functional.center_crop(img, self.size)


transforms.RandomCrop = _CentreCrop

__version__ = "0.0.0+distrun.shim"
