"""The shared shim's fake Pillow, with what yassouali/pytorch-segmentation adds to it.

utils/transforms.py runs `from PIL import Image, ImageOps, ImageFilter` at import time
(its transforms are not built by train.py: names only here), and the Trainer colours the
validation masks with utils/helpers.py colorize_mask, which calls `putpalette` on a
"P" image: here it keeps the palette on the image and changes nothing else. This package
runs the shared shim's PIL/__init__.py and adds the shared PIL folder to its __path__
(PIL.Image and PIL.ImageFile come from there), as amp_vit_cifar/shim/PIL does.
"""

import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
for _entry in _sys.path:
    _cand = _os.path.join(_os.path.abspath(_entry or "."), "PIL")
    if _cand != _here and _os.path.isfile(_os.path.join(_cand, "__init__.py")):
        __path__.append(_cand)
        _init = _os.path.join(_cand, "__init__.py")
        with open(_init) as _f:
            exec(compile(_f.read(), _init, "exec"))
        break

from PIL import Image as _image  # noqa: E402 - after __path__ reaches the shared package


def _putpalette(self, data, rawmode="RGB"):
    self.palette = list(data)


if not hasattr(_image.Image, "putpalette"):
    _image.Image.putpalette = _putpalette
