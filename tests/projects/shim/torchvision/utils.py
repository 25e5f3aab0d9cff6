"""Fake `torchvision.utils` (see torchvision/__init__.py)."""

from __future__ import annotations

import torch


def make_grid(tensor, nrow=8, padding=2, normalize=False, value_range=None, scale_each=False,
              pad_value=0.0, **kwargs):
    if isinstance(tensor, (list, tuple)):
        tensor = torch.stack(list(tensor))
    if tensor.dim() == 4:
        tensor = torch.cat(list(tensor), dim=-1)
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    return tensor


def save_image(tensor, fp, nrow=8, padding=2, normalize=False, format=None, **kwargs):
    """Writes a small text file (the tensor's shape) instead of a PNG."""
    if isinstance(tensor, (list, tuple)):
        tensor = torch.stack(list(tensor))
    text = f"fake image {tuple(tensor.shape)}\n".encode()
    if hasattr(fp, "write"):
        fp.write(text)
    else:
        with open(fp, "wb") as f:
            f.write(text)
