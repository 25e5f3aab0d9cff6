"""A stand-in for the `lmdb` extension (py-lmdb is not installed): pytorch-fm's
torchfm/dataset/criteo.py and avazu.py import it at module level, and examples/main.py
imports both; only the MovieLens data set, read with pandas, is used here."""


def open(*args, **kwargs):  # noqa: A001 - lmdb's own name
    raise RuntimeError("tabular_torchfm shim: lmdb is not available (Criteo/Avazu are not used)")
