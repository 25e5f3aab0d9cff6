"""A fake tensorboardX (not installed here): the shared shim's SummaryWriter stub, which
accepts every call and writes nothing (train_eval.py's `SummaryWriter(log_dir=...)`)."""

from _distrun_shim.tensorboard import SummaryWriter  # noqa: F401
