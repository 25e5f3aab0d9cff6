"""Shrinks dome272/Diffusion-Models-pytorch's ddpm_conditional.py for a CPU run, through
DISTRUN_SHIM_MAIN_GLOBALS (the upstream files unchanged): `train` given the settings that
launch() hard-codes (300 epochs, batch 14, 64x64 CIFAR folder on Windows, "cuda"), the
UNet made narrow and for 16x16 images, the diffusion's 1000 steps made 3."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import modules  # the run copy's modules.py (upstream's, or its converted copy)
import torch


def train(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`train(args)` with launch()'s settings replaced: DDPM_SHIM_EPOCHS, DDPM_SHIM_BATCH,
    16x16 images from data/train, the CPU."""

    @functools.wraps(original)
    def run(args: Any) -> Any:
        args.epochs = int(os.environ["DDPM_SHIM_EPOCHS"])
        args.batch_size = int(os.environ["DDPM_SHIM_BATCH"])
        args.image_size = 16
        args.dataset_path = "data/train"
        args.device = "cpu"
        return original(args)

    return run


class UNetSmallImages(modules.UNet_conditional):
    """upstream's UNet_conditional, layer for layer (the same names, blocks and forward),
    narrower and for 16x16 images: widths 8-64 where upstream has 64-512, a time embedding
    of 32 (upstream 256), and SelfAttention reshaping to the sizes of 16x16 images (8, 4,
    2, 4, 8, 16; upstream's are those of 64x64: 32, 16, 8, 16, 32, 64). The device is the
    CPU (upstream's default is "cuda"). 368 thousand parameters, not 23 million."""

    def __init__(self, c_in: int = 3, c_out: int = 3, time_dim: int = 32,
                 num_classes: int | None = None, device: str = "cpu") -> None:
        torch.nn.Module.__init__(self)
        w, e = 8, time_dim
        self.device = "cpu"
        self.time_dim = time_dim
        self.inc = modules.DoubleConv(c_in, w)
        self.down1 = modules.Down(w, 2 * w, emb_dim=e)
        self.sa1 = modules.SelfAttention(2 * w, 8)
        self.down2 = modules.Down(2 * w, 4 * w, emb_dim=e)
        self.sa2 = modules.SelfAttention(4 * w, 4)
        self.down3 = modules.Down(4 * w, 4 * w, emb_dim=e)
        self.sa3 = modules.SelfAttention(4 * w, 2)
        self.bot1 = modules.DoubleConv(4 * w, 8 * w)
        self.bot2 = modules.DoubleConv(8 * w, 8 * w)
        self.bot3 = modules.DoubleConv(8 * w, 4 * w)
        self.up1 = modules.Up(8 * w, 2 * w, emb_dim=e)
        self.sa4 = modules.SelfAttention(2 * w, 4)
        self.up2 = modules.Up(4 * w, w, emb_dim=e)
        self.sa5 = modules.SelfAttention(w, 8)
        self.up3 = modules.Up(2 * w, w, emb_dim=e)
        self.sa6 = modules.SelfAttention(w, 16)
        self.outc = torch.nn.Conv2d(w, c_out, kernel_size=1)
        if num_classes is not None:
            self.label_emb = torch.nn.Embedding(num_classes, time_dim)


def diffusion(original: type) -> Callable[..., Any]:
    """Diffusion with 3 noise steps (upstream 1000): sampling runs 2 steps, not 999."""
    return functools.partial(original, noise_steps=3)
