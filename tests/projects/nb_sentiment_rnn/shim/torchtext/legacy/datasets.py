"""A synthetic `torchtext.legacy.datasets.IMDB`: reviews of one length (no padding: the
halves of a batch pad as the whole does), words from a small list, the label `pos`
where positive words outnumber negative ones. Drawn from a generator of its own seeded
by the split's name (never Python's global one). Sizes: DISTRUN_SHIM_TRAIN_SIZE (64)
and DISTRUN_SHIM_TEST_SIZE (40); DISTRUN_SHIM_REVIEW_WORDS (12) words a review."""

from __future__ import annotations

import os
import random
from typing import Any

from torchtext.legacy.data import Dataset, Example, Field

_POSITIVE = ["good", "great", "fine", "superb", "moving", "funny", "clever", "warm"]
_NEGATIVE = ["bad", "dull", "awful", "boring", "weak", "silly", "flat", "poor"]
_NEUTRAL = ["the", "a", "film", "movie", "plot", "actor", "scene", "story", "it", "was",
            "and", "of", "this", "very", "quite", "ending"]


def _reviews(split: str, count: int, words: int) -> list[tuple[str, str]]:
    rng = random.Random(f"imdb-{split}")
    vocabulary = _POSITIVE + _NEGATIVE + _NEUTRAL
    reviews = []
    for _ in range(count):
        tokens = [rng.choice(vocabulary) for _ in range(words)]
        score = sum(t in _POSITIVE for t in tokens) - sum(t in _NEGATIVE for t in tokens)
        label = "pos" if score > 0 or (score == 0 and rng.random() < 0.5) else "neg"
        reviews.append((" ".join(tokens), label))
    return reviews


class IMDB(Dataset):
    @staticmethod
    def sort_key(example: Any) -> int:
        return len(example.text)

    @classmethod
    def splits(cls, text_field: Field, label_field: Field, root: str = ".data",
               **_: Any) -> tuple[Dataset, Dataset]:
        words = int(os.environ.get("DISTRUN_SHIM_REVIEW_WORDS", "12"))
        fields = [("text", text_field), ("label", label_field)]
        out = []
        for split, size in (("train", os.environ.get("DISTRUN_SHIM_TRAIN_SIZE", "64")),
                            ("test", os.environ.get("DISTRUN_SHIM_TEST_SIZE", "40"))):
            examples = [Example.fromlist([text, label], fields)
                        for text, label in _reviews(split, int(size), words)]
            dataset = cls(examples, fields)
            out.append(dataset)
        return out[0], out[1]
