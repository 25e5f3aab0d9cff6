"""A fake scikit-learn for the ionosphere MLP (not installed here): `preprocessing.LabelEncoder`
and `metrics.accuracy_score`."""

from . import metrics, preprocessing  # noqa: F401
