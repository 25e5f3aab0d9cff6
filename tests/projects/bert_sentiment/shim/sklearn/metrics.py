"""`accuracy_score`: the share of equal labels."""

from __future__ import annotations

import numpy as np


def accuracy_score(y_true, y_pred):
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    return float((y_true.astype(float) == y_pred.astype(float)).mean())
