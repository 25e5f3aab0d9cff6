"""A fake THUCNews (run by the harness in the run folder: `setup: python`): the ten class
names of the real class.txt, and `text<TAB>label` lines of 10 to 40 CJK characters
(train.txt 128 lines: one batch of the hard-coded batch_size 128 per epoch; dev.txt and
test.txt 128 each: DatasetIterater divides by len // batch_size, so every split holds at
least one full batch); embedding_SougouNews.npz, "pre-trained" vectors of 16 dimensions
(the real ones: 300) for the 60 characters + <UNK> + <PAD> (the model's embedding size is
read from this file: 16 keeps the 20 hard-coded epochs of TextCNN's 256-filter
convolutions within the time budget); THUCNews/saved_dict/ (in the repository, holding an
empty model.ckpt) where the best model is saved. No vocab.pkl: the script builds it and
pickles it when it is missing, as a fresh clone without the data files does.

`--train-copies N` writes train.txt's 128 lines N times in a row (the two-process run:
the converted script shares out whole batches of the hard-coded 128, one per rank; with
the lines twice, each rank's batch holds the single run's 128 lines, so a step of the
two ranks equals the original's step. Where the batches were not shared out, each rank
would take two steps per epoch and the weights would differ)."""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--train-copies", type=int, default=1)
copies = parser.parse_args().train_copies

CLASSES = ["finance", "realty", "stocks", "education", "science", "society", "politics",
           "sports", "game", "entertainment"]
CHARS = [chr(0x4E00 + i) for i in range(60)]

rng = np.random.default_rng(0)
data = pathlib.Path("THUCNews/data")
data.mkdir(parents=True, exist_ok=True)
pathlib.Path("THUCNews/saved_dict").mkdir(parents=True, exist_ok=True)
(data / "class.txt").write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
for split, n in (("train", 128), ("dev", 128), ("test", 128)):
    lines = []
    for i in range(n):
        label = i % len(CLASSES)
        # each class favours its own six characters, so there is something to learn
        own = CHARS[label * 6:label * 6 + 6]
        length = int(rng.integers(10, 41))
        text = "".join(own[int(rng.integers(6))] if rng.random() < 0.5
                       else CHARS[int(rng.integers(len(CHARS)))] for _ in range(length))
        lines.append(f"{text}\t{label}")
    if split == "train":
        lines = lines * copies
    (data / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
np.savez_compressed(data / "embedding_SougouNews", embeddings=rng.random((len(CHARS) + 2, 16)))
