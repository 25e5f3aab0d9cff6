"""Fake data for bucket_snli (run in the run folder): SNLI's three jsonl files where
snli_dataset() looks first (examples/snli/data/snli_1.0/, relative to the working
directory examples/snli), so its download_file_maybe_extract finds `check_files` and
downloads nothing. 16 training pairs (one batch of 16: 2 ranks x 8), premises of 2..9
words (the bucket sampler's sort key) and hypotheses of 2..6 words over a 30-word
vocabulary, three labels; 16 dev pairs (one whole batch: drop_last=True drops a
smaller one and the dev report then fails on `dev_loss.item()` of 0) and 8 test pairs (the
dev pass runs every `--dev_every` iterations)."""

import json
import os

import numpy as np

WORDS = [f"w{i}" for i in range(30)]
LABELS = ["entailment", "neutral", "contradiction"]


def rows(rng, n):
    out = []
    for _ in range(n):
        p = " ".join(rng.choice(WORDS, int(rng.integers(2, 10))))
        h = " ".join(rng.choice(WORDS, int(rng.integers(2, 7))))
        out.append({"sentence1": p, "sentence2": h,
                    "gold_label": LABELS[int(rng.integers(0, 3))],
                    "sentence1_binary_parse": "( " + p + " )",
                    "sentence2_binary_parse": "( " + h + " )"})
    return out


def main():
    rng = np.random.default_rng(27)
    folder = os.path.join("examples", "snli", "data", "snli_1.0")
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", 16), ("dev", 16), ("test", 8)):
        with open(os.path.join(folder, f"snli_1.0_{split}.jsonl"), "w") as f:
            for row in rows(rng, n):
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
