"""The fake scipy.stats: what mean_confidence_interval() names (never called here)."""

import numpy as np


def sem(a):
    a = np.asarray(a, dtype=float)
    return a.std(ddof=1) / np.sqrt(a.shape[0])


class t:  # noqa: N801 (scipy's name)
    @staticmethod
    def _ppf(q, df):
        raise NotImplementedError("the fake scipy has no t distribution")
