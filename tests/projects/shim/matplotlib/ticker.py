"""Fake `matplotlib.ticker` (see matplotlib/__init__.py): every name (`MultipleLocator`,
`FixedLocator`, ...) accepts anything (seq2seq_jhu imports it at module level)."""

from __future__ import annotations

from matplotlib import _Anything


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything()
