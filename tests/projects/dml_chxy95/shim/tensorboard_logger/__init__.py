"""A fake `tensorboard_logger` (the old standalone package): RepDistiller's
train_student.py imports it at module level and makes `tb_logger.Logger(logdir=...,
flush_secs=2)` whose `log_value(name, value, step)` it calls each epoch. The folder is
made (as the package does); nothing is written."""

from __future__ import annotations

import os


class Logger:
    def __init__(self, logdir: str, flush_secs: int = 2, **kwargs: object) -> None:
        del flush_secs, kwargs
        os.makedirs(logdir, exist_ok=True)
        self.logdir = logdir

    def log_value(self, name: str, value: object, step: int | None = None) -> None:
        del name, value, step


def configure(logdir: str, flush_secs: int = 2) -> None:
    os.makedirs(logdir, exist_ok=True)


def log_value(name: str, value: object, step: int | None = None) -> None:
    del name, value, step
