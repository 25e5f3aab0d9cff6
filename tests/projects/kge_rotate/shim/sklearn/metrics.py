"""sklearn.metrics.average_precision_score for codes/model.py's import (Countries only)."""

from __future__ import annotations

import numpy as np


def average_precision_score(y_true, y_score):
    y_true = np.asarray(y_true)
    order = np.argsort(-np.asarray(y_score), kind="stable")
    hits = y_true[order] == 1
    if not hits.any():
        return 0.0
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float(precision[hits].mean())
