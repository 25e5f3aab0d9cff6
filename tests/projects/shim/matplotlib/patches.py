"""Fake `matplotlib.patches` (see matplotlib/__init__.py): every name (`Rectangle`, ...)
accepts anything (ram_attention's utils.py imports it at module level)."""

from __future__ import annotations

from matplotlib import _Anything


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything()
