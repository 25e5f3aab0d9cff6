"""A fake tensorboardX (not installed here): the shared shim's SummaryWriter stub, which
accepts every call and writes nothing (search.py: `SummaryWriter(log_dir=...)`,
`add_text`, `add_scalar`)."""

from _distrun_shim.tensorboard import SummaryWriter  # noqa: F401
