"""A fake Cora for pygcn (run by the harness in the run folder: `setup: python`):
data/cora/cora.content (paper id, binary word features, class label) and
data/cora/cora.cites (cited id, citing id), in the real files' formats, with the node
count load_data() needs (its splits reach node 1499)."""

from __future__ import annotations

import pathlib

import numpy as np

NODES, WORDS, EDGES = 1500, 24, 3000
CLASSES = ["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods",
           "Reinforcement_Learning", "Rule_Learning", "Theory"]

rng = np.random.default_rng(0)
folder = pathlib.Path("data/cora")
folder.mkdir(parents=True, exist_ok=True)
ids = rng.choice(1_000_000, NODES, replace=False) + 31
labels = rng.integers(0, len(CLASSES), NODES)
with open(folder / "cora.content", "w") as f:
    for paper, label in zip(ids, labels, strict=True):
        # words that say something about the class, so that training learns
        words = (rng.random(WORDS) < 0.15) | (np.arange(WORDS) % len(CLASSES) == label)
        f.write("\t".join([str(paper), *map(str, words.astype(int)), CLASSES[label]]) + "\n")
with open(folder / "cora.cites", "w") as f:
    for _ in range(EDGES):
        a, b = rng.choice(NODES, 2, replace=False)
        f.write(f"{ids[a]}\t{ids[b]}\n")
