"""`TSNE`: `fit_transform(X)` returns a deterministic 2-D projection of X (its first
two principal directions): the notebook only plots it."""

from __future__ import annotations

import numpy as np


class TSNE:
    def __init__(self, n_components=2, **kwargs):
        self.n_components = n_components

    def fit_transform(self, X):
        X = np.asarray(X, dtype=np.float64)
        centered = X - X.mean(axis=0)
        _, _, vt = np.linalg.svd(centered, full_matrices=False)
        return centered @ vt[: self.n_components].T
