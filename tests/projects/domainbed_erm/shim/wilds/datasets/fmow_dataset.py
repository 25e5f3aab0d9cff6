"""Fake `wilds.datasets.fmow_dataset` (see ../../__init__.py)."""


class FMoWDataset:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the distrun corpus shim has no WILDS data")
