"""A fake MovieLens ratings.csv for pytorch-fm's examples/main.py (run by the harness in
the run folder: `setup: python`): examples/ml/ratings.csv with MovieLens 20M's header
(userId, movieId, rating, timestamp), 80 rows over 8 users and 10 movies. Each rating
comes from a user bias plus a movie bias (normal draws of a fixed generator), so that the
factorization machine can learn it: MovieLens20MDataset makes a rating above 3 a
positive, and with `--learning_rate 0.03` the validation AUC under torch's seed 0 (the
shim's) climbs over the epochs (0.2, 0.4, 0.47, 0.47, 0.53, 0.67, 0.87, 1.0 in 8 epochs;
epoch 3's 0.4666...66 is above epoch 2's 0.4666...56 by rounding): the EarlyStopper saves
after every step, the last save after the 8th. random_split keeps int(0.8 x 80) = 64
rows for training (one batch of 64), 8 for validation and 8 for the test, both classes
in each (roc_auc_score needs two)."""

from __future__ import annotations

import pathlib

import numpy as np

USERS, MOVIES = 8, 10
rng = np.random.default_rng(7)
user_bias, movie_bias = rng.normal(size=USERS), rng.normal(size=MOVIES)
folder = pathlib.Path("examples/ml")
folder.mkdir(parents=True, exist_ok=True)
lines = ["userId,movieId,rating,timestamp"]
for i in range(80):
    user, movie = i % USERS, (3 * i + i // USERS) % MOVIES
    score = user_bias[user] + movie_bias[movie]
    rating = 5 if score > 0.3 else 4 if score > 0 else 3 if score > -0.5 else 1
    lines.append(f"{user + 1},{movie + 1},{rating}.0,{1100000000 + 37 * i}")
(folder / "ratings.csv").write_text("\n".join(lines) + "\n")
