"""Fake WMT data for a-PyTorch-Tutorial-to-Transformers, in "transformer data/" of the
run folder (train.py's `/media/ssd/transformer data`, mapped there by
DISTRUN_SHIM_PATH_MAP): `bpe.model` (the youtokentome shim's word vocabulary: the four
specials, then w0..w23), `train.en`/`train.de` (16 pairs) and `val.en`/`val.de` (4
pairs), every source sentence 6 words and every target 6 words (8 tokens with <BOS> and
<EOS>): one length, so SequenceLoader's batches are chunks of `tokens_in_batch // 8`
pairs in file order (its sorts are stable), and every batch's loss is a mean over the
same number of tokens."""

import os

import numpy as np

rng = np.random.default_rng(0)
folder = "transformer data"
os.makedirs(folder, exist_ok=True)
words = [f"w{i}" for i in range(24)]
with open(os.path.join(folder, "bpe.model"), "w", encoding="utf-8") as f:
    f.write("\n".join(["<PAD>", "<UNK>", "<BOS>", "<EOS>", *words]) + "\n")
for split, n in (("train", 16), ("val", 4)):
    for suffix in ("en", "de"):
        lines = [" ".join(words[int(i)] for i in rng.integers(0, len(words), 6)) for _ in range(n)]
        with open(os.path.join(folder, f"{split}.{suffix}"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
