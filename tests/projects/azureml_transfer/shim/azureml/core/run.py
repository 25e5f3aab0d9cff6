"""Fake `azureml.core.run`: `Run.get_context()` returns an offline run whose `log`
prints the metric (on the process that calls it).

pytorch_train.py (2022) logs `np.float(x)`, an alias NumPy removed in 1.24: the script
imports this module at its top, before any `np.float`, so the alias (the builtin `float`,
what it always was) is put back here when NumPy lacks it."""

import numpy as _np

if not hasattr(_np, "float"):
    _np.float = float


class Run:
    """An offline run: `log(name, value)` prints the metric."""

    @classmethod
    def get_context(cls):
        return cls()

    def log(self, name, value, description=""):
        print(f"[azureml run] {name} = {value}")

    def __getattr__(self, name):
        return lambda *args, **kwargs: None
