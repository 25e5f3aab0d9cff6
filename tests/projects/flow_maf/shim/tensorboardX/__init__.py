"""A fake tensorboardX (not installed here): the shared shim's SummaryWriter stub, which
accepts every call and writes nothing (main.py's `SummaryWriter(comment=...)`)."""

from _distrun_shim.tensorboard import SummaryWriter  # noqa: F401
