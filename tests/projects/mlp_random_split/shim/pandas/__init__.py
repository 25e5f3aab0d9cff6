"""A fake pandas for the ionosphere MLP (pandas is not installed here): `read_csv(path,
header=None)` of a small comma-separated file, giving a DataFrame whose `values` is a
numpy object array (numbers as floats, other fields as strings), as pandas gives for
mixed columns."""

from __future__ import annotations

import csv

import numpy as np


def _field(text):
    try:
        return float(text)
    except ValueError:
        return text


class DataFrame:
    def __init__(self, rows):
        self.values = np.array(rows, dtype=object)

    def __len__(self):
        return len(self.values)


def read_csv(path, header="infer", **kwargs):
    with open(path, newline="") as f:
        rows = [[_field(x) for x in row] for row in csv.reader(f) if row]
    if header is not None:
        rows = rows[1:]
    return DataFrame(rows)
