"""A fake `tensorboard_logger` (the old standalone package ram_attention's trainer.py
imports at module level): `configure(logdir)` makes the folder, `log_value(name, value,
step)` writes nothing. Only used with `--use_tensorboard True`, which the runs leave off."""

from __future__ import annotations

import os


def configure(logdir: str, flush_secs: int = 2) -> None:
    os.makedirs(logdir, exist_ok=True)


def log_value(name: str, value: object, step: int | None = None) -> None:
    del name, value, step
