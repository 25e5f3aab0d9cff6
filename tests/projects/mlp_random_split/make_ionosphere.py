"""A fake ionosphere.csv for the MLP (run by the harness in the run folder: `setup:
python`): data/ionosphere.csv, 34 numeric columns and a class 'g' or 'b' like the real
file, 46 rows: getSplits() keeps round(0.3 x 46) = 14 for the dev set and 32 for
training, one batch of 32 per epoch."""

from __future__ import annotations

import pathlib

import numpy as np

rng = np.random.default_rng(0)
folder = pathlib.Path("data")
folder.mkdir(exist_ok=True)
with open(folder / "ionosphere.csv", "w") as f:
    for i in range(46):
        good = i % 2 == 0
        values = rng.uniform(-1, 1, 34) + (0.4 if good else -0.4)
        f.write(",".join(f"{v:.5f}" for v in values) + ("," + ("g" if good else "b")) + "\n")
