"""Fake `seaborn` for bohyunshin/recommender's libs/plot/plot.py (imported at module level
by train.py): `set_style` and `lineplot`, like every other name, accept anything and draw
nothing (the shared shim's fake matplotlib takes the rest of the plot)."""

from __future__ import annotations

from matplotlib import _Anything


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything()
