"""A fake pandas for bert-sentiment (pandas is not installed here): `read_csv` of a
small file with a header, `fillna`, columns read and assigned as attributes or by
`df[name]`, `Series.apply`, `.values` (numpy), `reset_index(drop=True)`, `len`, and
`take(positions)` (used by the fake sklearn's train_test_split)."""

from __future__ import annotations

import csv

import numpy as np


class Series:
    def __init__(self, values, name=None):
        self.values = np.asarray(values, dtype=object)
        self.name = name

    def apply(self, fn):
        return Series([fn(v) for v in self.values], self.name)

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)


class DataFrame:
    def __init__(self, columns: dict):
        object.__setattr__(self, "_columns",
                           {k: np.asarray(v, dtype=object) for k, v in columns.items()})

    @property
    def columns(self):
        return list(self._columns)

    def __getattr__(self, name):
        columns = object.__getattribute__(self, "_columns")
        if name in columns:
            return Series(columns[name], name)
        raise AttributeError(name)

    def __setattr__(self, name, value):
        self[name] = value

    def __getitem__(self, name):
        return Series(self._columns[name], name)

    def __setitem__(self, name, value):
        values = value.values if isinstance(value, Series) else value
        self._columns[name] = np.asarray(values, dtype=object)

    def __len__(self):
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def fillna(self, value):
        return DataFrame({k: [value if v is None or v == "" else v for v in col]
                          for k, col in self._columns.items()})

    def take(self, positions):
        positions = np.asarray(positions, dtype=int)
        return DataFrame({k: col[positions] for k, col in self._columns.items()})

    def reset_index(self, drop=False):
        return DataFrame(dict(self._columns))


def read_csv(path, **kwargs):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = list(rows[0]) if rows else []
    return DataFrame({n: [r[n] for r in rows] for n in names})
