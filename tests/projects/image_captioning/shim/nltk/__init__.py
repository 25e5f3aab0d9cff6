"""A fake nltk (image_captioning): `nltk.tokenize.word_tokenize` only."""

from . import tokenize  # noqa: F401
