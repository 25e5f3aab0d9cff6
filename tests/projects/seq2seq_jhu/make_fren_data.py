"""Fake data of seq2seq_jhu (run in the run folder): hw5/data/fren.{train,dev,test}.bpe,
lines `SOURCE|||TARGET` as the course's BPE files hold them, from a fixed generator.

16 training pairs of 2-6 words (random.choice draws from them), 4 dev pairs and 4 test
pairs over the same words; the words of the script's four attention sentences
(seq2seq.py's main(): "on p@@ eu@@ t me faire confiance ." ...) are in the source
vocabulary, as they are in the real corpus (unknown words are skipped anyway)."""

from __future__ import annotations

import random
from pathlib import Path

SRC = ("on p@@ eu@@ t me faire confiance . j en suis contente vous etes tres genti@@ ls "
       "c est mon hero@@ s je ne pas du@@ re").split()
TGT = ("i m you are very nice he she it is not tough happy trust me can my hero "
       "we they").split()


def pairs(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        src = " ".join(rng.choice(SRC) for _ in range(rng.randint(2, 6)))
        tgt = " ".join(rng.choice(TGT) for _ in range(rng.randint(2, 6)))
        out.append(f"{src}|||{tgt}")
    return out


def main() -> None:
    rng = random.Random(25)
    folder = Path("hw5/data")
    folder.mkdir(parents=True, exist_ok=True)
    # the first 3 lines hold every source and target word (9 a line), so the vocabularies are
    # fixed: 2 + len(set(SRC)) source words, 2 + len(set(TGT)) target words
    lines = [" ".join(SRC[i:i + 9]) + "|||" + " ".join(TGT[i:i + 9]) for i in (0, 9, 18)]
    lines += pairs(rng, 13)
    for split, text in (("train", lines), ("dev", pairs(rng, 4)), ("test", pairs(rng, 4))):
        (folder / f"fren.{split}.bpe").write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
