"""Fake `wilds.datasets.camelyon17_dataset` (see ../../__init__.py)."""


class Camelyon17Dataset:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the distrun corpus shim has no WILDS data")
