"""Fake `visdom` (kuc2477/pytorch-ewc's train.py makes a client at the start of train()).

`Visdom(env=...)` connects to nothing; `line`, `image`, `images` and every other method
accept anything and return a window name, as the client does.
"""

from __future__ import annotations


class Visdom:
    def __init__(self, *args, **kwargs):
        self.env = kwargs.get("env")
        self._windows = 0

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def plot(*args, **kwargs):
            win = kwargs.get("win")
            if win is None:
                self._windows += 1
                win = f"window_{self._windows}"
            return win

        return plot
