"""A fake MovieLens 1M ratings.dat for bohyunshin/recommender (run by the harness in the
run folder: `setup: python`): recommender/.data/movielens/ml-1m/ratings.dat, the path
of MovieLens1mPath.ratings (relative to the repository root, where train.py chdirs), in
ml-1m's `UserID::MovieID::Rating::Timestamp` format.

8 users x 10 ratings over 30 movies (ids 1..30, each user's 10 drawn without repeats by
a fixed generator; every movie rated by someone: Preprocessor.mapping numbers the rated
ones). Every user has MIN_REVIEWS = 5 or more; train_test_split(test_size=1 - 0.8,
stratify=user_id, random_state=42) keeps 64 ratings for training (8 per user: one batch
of 64, 2 ranks x 32) and 16 for validation."""

from __future__ import annotations

import pathlib

import numpy as np

USERS, PER_USER, MOVIES = 8, 10, 30
rng = np.random.default_rng(16)
folder = pathlib.Path("recommender/.data/movielens/ml-1m")
folder.mkdir(parents=True, exist_ok=True)
rows = []
seen: set[int] = set()
for user in range(USERS):
    # the last user takes the movies nobody has rated yet first, so every id is rated
    left = [m for m in range(1, MOVIES + 1) if m not in seen]
    picked = list(rng.choice(left, size=min(len(left), PER_USER), replace=False)) \
        if user == USERS - 1 else []
    others = [m for m in rng.permutation(MOVIES) + 1 if m not in picked]
    movies = (picked + others)[:PER_USER]
    seen.update(int(m) for m in movies)
    for k, movie in enumerate(movies):
        rows.append(f"{user + 1}::{int(movie)}::{int(rng.integers(1, 6))}"
                    f"::{978300000 + 61 * (user * PER_USER + k)}")
(folder / "ratings.dat").write_text("\n".join(rows) + "\n")
