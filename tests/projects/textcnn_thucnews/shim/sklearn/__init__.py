"""A fake scikit-learn for train_eval.py (not installed here): `metrics`."""

from . import metrics  # noqa: F401
