"""A tiny text8 for the Skip-gram notebook (run by the harness in the run folder:
`setup: python`): word2vec-embeddings/data/text8, one line of lower-case words like the
real file. 650 words of 16 occurrences each (10400 words): every word survives
utils.preprocess (more than 5 occurrences), the notebook's subsampling (threshold 1e-5)
keeps about 8% of them, some 800 training words: one batch of 512 per epoch; the t-SNE
cell plots the first 600 words of the vocabulary."""

from __future__ import annotations

import pathlib

import numpy as np

rng = np.random.default_rng(0)
words = np.repeat([f"w{i}" for i in range(650)], 16)
rng.shuffle(words)
folder = pathlib.Path("word2vec-embeddings/data")
folder.mkdir(parents=True, exist_ok=True)
(folder / "text8").write_text(" " + " ".join(words))
