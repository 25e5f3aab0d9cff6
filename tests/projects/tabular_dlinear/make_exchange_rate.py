"""A fake exchange_rate.csv for LTSF-Linear's run_longExp.py (run by the harness in the
run folder: `setup: python`): dataset/exchange_rate.csv laid out like the repository's
data set (a `date` column, then the series `0` to `6` and the target `OT`), 190 rows of
eight slow sine waves with noise from a fixed generator, one row a day.

Dataset_Custom (data_provider/data_loader.py:235-239) splits 190 rows into 133 for
training, int(0.2 x 190) = 38 for the test and 19 for validation. With `--seq_len 114
--pred_len 4` that makes 133 - 114 - 4 + 1 = 16 training windows (one batch of 16),
19 - 4 + 1 = 16 validation windows (the validation loader drops its last incomplete
batch: one batch of 16 on one process, two of 8 on each of two ranks) and 38 - 4 + 1 =
35 test windows."""

from __future__ import annotations

import datetime
import pathlib

import numpy as np

ROWS, SERIES = 190, 8
rng = np.random.default_rng(0)
t = np.arange(ROWS)[:, None]
phase = rng.uniform(0, 2 * np.pi, SERIES)
period = rng.uniform(20, 60, SERIES)
values = np.sin(2 * np.pi * t / period + phase) + 0.1 * rng.normal(size=(ROWS, SERIES))
start = datetime.datetime(1990, 1, 1)
folder = pathlib.Path("dataset")
folder.mkdir(exist_ok=True)
lines = ["date," + ",".join([str(i) for i in range(SERIES - 1)] + ["OT"])]
for row in range(ROWS):
    day = (start + datetime.timedelta(days=row)).strftime("%Y/%-m/%-d 0:00")
    lines.append(day + "," + ",".join(f"{v:.6f}" for v in values[row]))
(folder / "exchange_rate.csv").write_text("\n".join(lines) + "\n")
