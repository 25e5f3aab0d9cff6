"""A fake UCI POWER file for ikostrikov/pytorch-flows (run by the harness in the run
folder: `setup: python`): data/power/data.npy, 38 rows of 8 float64 columns (the layout
datasets/power.py reads: it drops columns 3 and 1, adds its noise from
RandomState(42), then keeps 10% for test (3 rows), 10% of the rest for validation (3
rows): 32 training rows, one batch of 32 on one process, 2 x 16 on two ranks)."""

from __future__ import annotations

import pathlib

import numpy as np

rows = 38
out = pathlib.Path("data/power")
out.mkdir(parents=True, exist_ok=True)
g = np.random.RandomState(7)
data = g.rand(rows, 8) * np.array([3.0, 0.5, 240.0, 10.0, 2.0, 20.0, 2.0, 30.0])
np.save(out / "data.npy", data)
