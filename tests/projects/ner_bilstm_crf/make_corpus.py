"""A fake corpus for jidasheng/bi-lstm-crf (run by the harness in the run folder: `setup:
python`): corpus/vocab.json (the token list), corpus/tags.json (the tag list) and
corpus/dataset.txt, one sentence a line in the repository's format: a JSON list of
tokens, a tab, a JSON list of BIO tags (CoNLL-like word tokens, as the README allows:
"a json list of words"). 20 sentences of 3-10 tokens: Preprocessor.load_dataset keeps
the first 12 for training (val_split 0.2 and test_split 0.2 take 4 each), padded to
--max_seq_len with index 0 (<PAD>); a few words of the data left out of vocab.json
(<OOV>)."""

from __future__ import annotations

import json
import pathlib

import numpy as np

SENTENCES, WORDS = 20, 30
TYPES = ["PER", "ORG", "LOC"]
TAGS = ["O"] + [f"{p}-{t}" for t in TYPES for p in "BI"]

rng = np.random.default_rng(0)
folder = pathlib.Path("corpus")
folder.mkdir(parents=True, exist_ok=True)
words = [f"w{i}" for i in range(WORDS)]
lines = []
for _ in range(SENTENCES):
    n = int(rng.integers(3, 11))
    tokens = [words[int(i)] for i in rng.integers(0, WORDS, n)]
    tags = ["O"] * n
    start = int(rng.integers(0, n))
    kind = TYPES[int(rng.integers(0, len(TYPES)))]
    for k in range(start, min(n, start + int(rng.integers(1, 3)))):
        tags[k] = ("B-" if k == start else "I-") + kind
        tokens[k] = f"{kind.lower()}{int(rng.integers(0, 5))}"
    lines.append(json.dumps(tokens) + "\t" + json.dumps(tags))
(folder / "dataset.txt").write_text("\n".join(lines) + "\n", encoding="utf8")
vocab = words[:-3] + [f"{t.lower()}{i}" for t in TYPES for i in range(5)]
(folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf8")
(folder / "tags.json").write_text(json.dumps(TAGS), encoding="utf8")
