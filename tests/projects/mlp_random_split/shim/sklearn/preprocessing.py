"""`LabelEncoder`: classes sorted, each label replaced by its class's index."""

from __future__ import annotations

import numpy as np


class LabelEncoder:
    def fit(self, y):
        self.classes_ = np.array(sorted(set(np.asarray(y).ravel().tolist())), dtype=object)
        return self

    def transform(self, y):
        index = {c: i for i, c in enumerate(self.classes_.tolist())}
        return np.array([index[v] for v in np.asarray(y).ravel().tolist()])

    def fit_transform(self, y):
        return self.fit(y).transform(y)
