"""Fake `lmdb` (read side only): an "environment" is a folder holding `data.pkl`, a dict
of bytes keys to bytes values written by ../../make_lmdb.py; `open(...).begin()` gives a
transaction whose `get(key)` reads it."""

import builtins
import os
import pickle


class _Txn:
    def __init__(self, data):
        self._data = data

    def get(self, key, default=None):
        return self._data.get(key, default)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Environment:
    def __init__(self, path, **kwargs):
        with builtins.open(os.path.join(path, "data.pkl"), "rb") as f:
            self._data = pickle.load(f)

    def begin(self, write=False, **kwargs):
        return _Txn(self._data)

    def close(self):
        pass


def open(path, **kwargs):  # noqa: A001 (lmdb's name)
    return Environment(path, **kwargs)
