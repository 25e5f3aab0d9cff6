"""Fake data of bigram_lecture (run in the run folder): input.txt, the tiny-Shakespeare
file bigram.py reads (upstream's own is 1.1 MB), as 1200 characters of made-up lines
from 20 words and a fixed generator: 1080 training characters, 120 validation ones
(bigram.py splits 90 / 10), a vocabulary of 34 characters."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("the king lord sir my good what now come hath thou are not so her "
         "let me be to a").split()


def main() -> None:
    rng = random.Random(25)
    text = ""
    while len(text) < 1200:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
        text += line.capitalize() + (",\n" if rng.random() < 0.5 else ".\n")
    Path("input.txt").write_text(text[:1199] + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
