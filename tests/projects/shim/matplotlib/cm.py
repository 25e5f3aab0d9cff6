"""Fake `matplotlib.cm` (see matplotlib/__init__.py): colormaps return RGBA tuples."""

from __future__ import annotations


class _Colormap:
    def __init__(self, name="viridis"):
        self.name = name

    def __call__(self, x, *args, **kwargs):
        return (0.0, 0.0, 0.0, 1.0)


def get_cmap(name="viridis", lut=None):
    return _Colormap(name)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Colormap(name)
