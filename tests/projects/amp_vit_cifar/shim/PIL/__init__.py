"""The shared shim's fake Pillow, with the three submodules randomaug.py imports.

randomaug.py runs `import PIL, PIL.ImageOps, PIL.ImageEnhance, PIL.ImageDraw` at import
time (train_cifar10.py imports it whatever --noaug says); its RandAugment is only built
without --noaug, which the test passes, so the submodules are names only. This package
runs the shared shim's PIL/__init__.py and adds the shared PIL folder to its __path__
(PIL.Image and PIL.ImageFile come from there).
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
