"""A fake `torchvision.models` for image_captioning's model.py: a small `resnet152`
stand-in with ResNet's children ORDER (the last child `fc`, which EncoderCNN drops with
`list(resnet.children())[:-1]`, reading `fc.in_features`): a convolution, ReLU, adaptive
average pooling to 1x1, `fc`. No BatchNorm (the encoder runs it under `torch.no_grad()`
in training mode). Its "pretrained" weights come from its own generator (seeded 152),
never the global one: the same in every process, offline, whatever `pretrained` says."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ResNet(nn.Module):
    def __init__(self, channels: int = 6, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)
        generator = torch.Generator().manual_seed(152)
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.relu(self.conv1(x)))
        return self.fc(torch.flatten(x, 1))


def resnet152(pretrained: bool = False, **kwargs: Any) -> ResNet:
    return ResNet()
