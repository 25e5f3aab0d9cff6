"""The fake `torchtext.legacy`: Field, LabelField, BucketIterator and a synthetic IMDB."""

from torchtext.legacy import data, datasets  # noqa: F401
