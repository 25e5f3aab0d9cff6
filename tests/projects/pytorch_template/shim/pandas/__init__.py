"""A fake pandas for pytorch-template's MetricTracker (utils/util.py): pandas is not
installed here. Only `DataFrame(index=keys, columns=[...])`, a column by attribute or by
`df[col]`, `series[key]` read and write, `series.values[:] = 0`, `dict(series)` and
`df.columns`.
"""

from __future__ import annotations

import numpy as np


class Series:
    def __init__(self, index):
        self.index = list(index)
        self.values = np.zeros(len(self.index), dtype=object)

    def __getitem__(self, key):
        return self.values[self.index.index(key)]

    def __setitem__(self, key, value):
        self.values[self.index.index(key)] = value

    def keys(self):
        return list(self.index)

    def __iter__(self):
        return iter(self.values)


class DataFrame:
    def __init__(self, data=None, index=None, columns=None):
        object.__setattr__(self, "index", list(index or []))
        object.__setattr__(self, "columns", list(columns or []))
        object.__setattr__(self, "_series", {c: Series(self.index) for c in self.columns})

    def __getitem__(self, column):
        return self._series[column]

    def __getattr__(self, column):
        try:
            return self._series[column]
        except KeyError as e:
            raise AttributeError(column) from e
