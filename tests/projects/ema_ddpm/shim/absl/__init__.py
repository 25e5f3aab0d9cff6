"""Fake absl-py (not installed here) for ema_ddpm: `absl.flags` and `absl.app`, as much
as w86763777/pytorch-ddpm's main.py uses."""
