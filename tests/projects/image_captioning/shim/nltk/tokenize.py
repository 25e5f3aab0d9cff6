"""A fake `nltk.tokenize.word_tokenize`: words and punctuation marks split apart (the
harness's captions are plain lower-case ASCII words and a final '.')."""

from __future__ import annotations

import re


def word_tokenize(text: str, language: str = "english", preserve_line: bool = False) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text)
