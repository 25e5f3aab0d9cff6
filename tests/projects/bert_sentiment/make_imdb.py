"""A fake IMDB review file for bert-sentiment (run by the harness in the run folder:
`setup: python`): input/imdb.csv with the columns `review` and `sentiment`, 9 rows (the
project keeps 90%: 8 training reviews, one batch of TRAIN_BATCH_SIZE = 8, and 1
validation review: row 7, the first of numpy's RandomState(42).permutation(9)). The
validation review is positive: the untrained model already calls it positive, so
accuracy is 1.0 after the first epoch and model.bin is written then (never again: no
later epoch beats 1.0)."""

from __future__ import annotations

import csv
import pathlib

import numpy as np

GOOD = ["great", "wonderful", "moving", "brilliant", "fun", "superb"]
BAD = ["boring", "awful", "dull", "weak", "bad", "tedious"]
NEUTRAL = ["the", "film", "plot", "actor", "story", "scene", "music", "ending"]

rng = np.random.default_rng(0)
folder = pathlib.Path("input")
folder.mkdir(exist_ok=True)
with open(folder / "imdb.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["review", "sentiment"])
    for i in range(9):
        positive = i % 2 == 0 or i == 7
        words = list(rng.choice(NEUTRAL, 6)) + list(rng.choice(GOOD if positive else BAD, 3))
        rng.shuffle(words)
        writer.writerow([" ".join(words), "positive" if positive else "negative"])
