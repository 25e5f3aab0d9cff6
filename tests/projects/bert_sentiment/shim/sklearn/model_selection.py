"""`train_test_split` of a fake DataFrame (or array): ceil(test_size * n) rows for the
test part, chosen by numpy's RandomState(random_state) permutation; `stratify` is
accepted and ignored (the harness's data is made so that it does not matter)."""

from __future__ import annotations

import math

import numpy as np


def train_test_split(data, test_size=0.25, random_state=None, stratify=None, shuffle=True):
    n = len(data)
    n_test = math.ceil(test_size * n) if isinstance(test_size, float) else int(test_size)
    order = np.random.RandomState(random_state).permutation(n) if shuffle else np.arange(n)
    test, train = order[:n_test], order[n_test:]
    if hasattr(data, "take"):
        return data.take(train), data.take(test)
    array = np.asarray(data)
    return array[train], array[test]
