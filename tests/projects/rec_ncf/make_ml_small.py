"""A fake MovieLens "ml-latest-small" ratings.csv for changhyeonnam/NCF (run by the
harness in the run folder: `setup: python`): dataset100k/ml-latest-small/ratings.csv,
the path main.py reads with `-fi 100k -dl False` (root 'dataset' + file_size, then
Download's 'ml-latest-small/ratings.csv'), with MovieLens' header (userId, movieId,
rating, timestamp).

10 users x 12 ratings over 120 movies, each movie rated once (movie ids 1..120, shuffled
over the users by a fixed generator). split_train_test keeps one rating per user for the
test (110 training positives); MovieLens(ng_ratio=4) adds 4 negatives to each: 550
training samples, one batch of 550 (2 ranks x 275). The test set (ng_ratio=99) needs 99
movies a user has not rated among the rated ones (`all_movieIds = total_df['movieId']
.unique()`, drawn without repeats per user): 120 - 12 = 108 here, so the sampling loop
ends."""

from __future__ import annotations

import pathlib

import numpy as np

USERS, PER_USER = 10, 12
rng = np.random.default_rng(16)
movies = rng.permutation(USERS * PER_USER) + 1
folder = pathlib.Path("dataset100k/ml-latest-small")
folder.mkdir(parents=True, exist_ok=True)
lines = ["userId,movieId,rating,timestamp"]
for user in range(USERS):
    for k in range(PER_USER):
        movie = int(movies[user * PER_USER + k])
        rating = float(rng.integers(1, 11)) / 2
        lines.append(f"{user + 1},{movie},{rating},{964980000 + 101 * (user * PER_USER + k)}")
(folder / "ratings.csv").write_text("\n".join(lines) + "\n")
