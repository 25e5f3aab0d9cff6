"""A fake scikit-learn for bert-sentiment (not installed here): `model_selection` and
`metrics`, each with the one function the project calls."""

from . import metrics, model_selection  # noqa: F401
