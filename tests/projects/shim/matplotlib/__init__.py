"""A fake matplotlib for the projects' shim (notebooks plot; nothing is drawn here).

`matplotlib.pyplot`: every function (`figure`, `imshow`, `plot`, `show`, `subplots`,
`ion`, `cla`, `pause`, ...) accepts anything; figures and axes accept every call and
attribute. `matplotlib.cm`: colormaps (`cm.rainbow(x)`, `cm.get_cmap(name)`) return RGBA
tuples. `matplotlib.colors.to_rgba` returns an RGBA tuple. `matplotlib.use` does nothing.
"""

from __future__ import annotations

__version__ = "0.0.0+distrun.shim"


class _Anything:
    """Accepts every call, attribute and item; calls return another _Anything."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __setattr__(self, name, value):
        pass

    def __getitem__(self, key):
        return _Anything()

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter((_Anything(), _Anything()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


rcParams: dict = {}


def use(*args, **kwargs):
    return None


def rc(*args, **kwargs):
    return None
