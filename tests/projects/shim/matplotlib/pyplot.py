"""Fake `matplotlib.pyplot` (see matplotlib/__init__.py): every name is a function that
accepts anything; `subplots` returns a (figure, axes) pair."""

from __future__ import annotations

from matplotlib import _Anything


def subplots(nrows=1, ncols=1, *args, **kwargs):
    if nrows == 1 and ncols == 1:
        return _Anything(), _Anything()
    if nrows == 1 or ncols == 1:
        return _Anything(), [_Anything() for _ in range(max(nrows, ncols))]
    return _Anything(), [[_Anything() for _ in range(ncols)] for _ in range(nrows)]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything()
