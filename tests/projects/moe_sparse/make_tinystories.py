"""Fake TinyStories for moe_sparse: dataset/TinyStories/train.csv (train.py's
`data.path`), a `text` column of 5 stories of 17 ASCII characters each. With the fake
tiktoken (one token a character) and `data.seq_len=8`, each story gives 2 chunks of 9
tokens: 10 sequences, split 8 (training) / 2 (validation) by train.py's random_split."""

import csv
import os
import random

rng = random.Random(25)
letters = "abcdefghijklmnopqrstuvwxyz .,"
os.makedirs(os.path.join("dataset", "TinyStories"), exist_ok=True)
with open(os.path.join("dataset", "TinyStories", "train.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["text"])
    for _ in range(5):
        writer.writerow(["".join(rng.choice(letters) for _ in range(17))])
