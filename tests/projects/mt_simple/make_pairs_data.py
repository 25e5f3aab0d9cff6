"""Fake data of mt_simple (run in the run folder): data/train.txt and data/dev.txt, lines
`ENGLISH<TAB>CHINESE` as the repository's files hold them ("Take care.\t照顾好自己。").

prepare_data.py tokenizes the English side with nltk's word_tokenize (the shim splits on
spaces) and the Chinese side CHARACTER by character; here ASCII letters stand for the
characters (the script opens the files with the locale's encoding). 8 training pairs
(the single run's one batch of 8, --batch-size 8) and 4 dev pairs, every English side 5
words and every "Chinese" side 4 characters: each sentence becomes BOS + tokens + EOS of
the same length, so no batch is padded and every half batch holds the same number of
target tokens (batch.ntokens), the loss's divisor."""

from __future__ import annotations

import random
from pathlib import Path

EN = "i you he she we they see want like the a cat dog tea book red".split()
CN = "abcdefghijklmn"


def pairs(rng: random.Random, n: int, en_words, cn_chars) -> list[str]:
    out = []
    for _ in range(n):
        en = " ".join(rng.choice(en_words) for _ in range(5))
        cn = "".join(rng.choice(cn_chars) for _ in range(4))
        out.append(f"{en}\t{cn}")
    return out


def main() -> None:
    rng = random.Random(23)
    folder = Path("data")
    folder.mkdir(parents=True, exist_ok=True)
    train = pairs(rng, 8, EN, CN)
    # the dev pairs use only words and letters of the training pairs: the vocabulary is
    # built from train.txt, and an unknown token becomes UNK = 0, the index Batch takes
    # for padding (pad=0), which would drop it from the dev batch's token count
    en_seen = sorted({w for line in train for w in line.split("\t")[0].split()})
    cn_seen = sorted({c for line in train for c in line.split("\t")[1]})
    dev = pairs(rng, 4, en_seen, cn_seen)
    (folder / "train.txt").write_text("\n".join(train) + "\n", encoding="ascii")
    (folder / "dev.txt").write_text("\n".join(dev) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
