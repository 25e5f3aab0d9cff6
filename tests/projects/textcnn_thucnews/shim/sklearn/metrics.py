"""`accuracy_score`, `classification_report` (a short text) and `confusion_matrix`: what
train_eval.py's evaluate() calls."""

from __future__ import annotations

import numpy as np


def accuracy_score(y_true, y_pred):
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    return float((y_true == y_pred).mean()) if y_true.size else 0.0


def classification_report(y_true, y_pred, target_names=None, digits=2):
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    names = list(target_names) if target_names is not None else sorted(set(y_true.tolist()))
    lines = []
    for i, name in enumerate(names):
        hit = int(((y_true == i) & (y_pred == i)).sum())
        lines.append(f"{name}: {hit}/{int((y_true == i).sum())}")
    return "\n".join(lines) + f"\naccuracy {accuracy_score(y_true, y_pred):.{digits}f}"


def confusion_matrix(y_true, y_pred):
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    n = int(max(y_true.max(initial=0), y_pred.max(initial=0))) + 1
    out = np.zeros((n, n), dtype=int)
    for t, p in zip(y_true.tolist(), y_pred.tolist(), strict=True):
        out[t, p] += 1
    return out
