"""A SummaryWriter that accepts every call and writes nothing."""

from __future__ import annotations

import os


class SummaryWriter:
    def __init__(self, log_dir=None, *args, **kwargs):
        self.log_dir = log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)

    def __getattr__(self, name):
        if name.startswith("add_") or name in {"flush", "close"}:
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
