"""A fake wandb for the projects' shim: nothing leaves the machine, nothing is written.

`wandb.init(...)` accepts any arguments (project, resume, anonymous, mode, config...)
and returns a run whose methods accept anything; `wandb.log`, `wandb.watch`,
`wandb.finish`, `wandb.config`, `wandb.Image`, `wandb.Histogram`, `wandb.Table`... too.
"""

from __future__ import annotations


class _Anything:
    """Accepts every call, attribute and item; returns itself or None."""

    def __init__(self, *args, **kwargs):
        self._args, self._kwargs = args, kwargs

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        return None

    def __setitem__(self, key, value):
        pass

    def __getitem__(self, key):
        return _Anything()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Config(dict):
    def update(self, *args, allow_val_change=False, **kwargs):  # noqa: D102
        # wandb's config.update also takes an argparse.Namespace (its vars)
        args = tuple(vars(a) if hasattr(a, "_get_kwargs") else a for a in args)
        super().update(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(name) from e

    def __setattr__(self, name, value):
        self[name] = value


class Run(_Anything):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "config", _Config(kwargs.get("config") or {}))
        object.__setattr__(self, "logged", [])

    def log(self, data=None, *args, **kwargs):
        self.logged.append(data)

    def finish(self, *args, **kwargs):
        pass


run = None
config = _Config()


def init(*args, **kwargs):
    global run
    run = Run(*args, **kwargs)
    return run


def log(data=None, *args, **kwargs):
    if run is not None:
        run.log(data)


def finish(*args, **kwargs):
    pass


def watch(*args, **kwargs):
    pass


def login(*args, **kwargs):
    return True


def save(*args, **kwargs):
    # wandb.save(glob): uploads files matching it with the run; nothing here
    return []


class Image(_Anything):
    pass


class Histogram(_Anything):
    pass


class Table(_Anything):
    pass


class Video(_Anything):
    pass


class Artifact(_Anything):
    pass
