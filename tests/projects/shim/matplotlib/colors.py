"""Fake `matplotlib.colors` (see matplotlib/__init__.py)."""

from __future__ import annotations


def to_rgba(c, alpha=None):
    return (0.0, 0.0, 0.0, 1.0 if alpha is None else float(alpha))


def to_rgb(c):
    return (0.0, 0.0, 0.0)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    from matplotlib import _Anything

    return _Anything()
