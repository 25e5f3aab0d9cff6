"""A fake pandas for jidasheng/bi-lstm-crf (pandas is not installed here): train.py only
writes its loss table (`pd.DataFrame(data=losses, columns=[...]).to_csv(path,
index=False)`) and reads it back on --recovery (`pd.read_csv(path).values.tolist()`)."""

from __future__ import annotations

import csv

import numpy as np


class DataFrame:
    def __init__(self, data=None, columns=None):
        self.columns = list(columns or [])
        self.values = np.array(data if data is not None else [], dtype=object)

    def to_csv(self, path, index=True):
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(self.columns)
            writer.writerows(self.values.tolist())


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return DataFrame([[float(x) for x in row] for row in rows[1:]], rows[0])
