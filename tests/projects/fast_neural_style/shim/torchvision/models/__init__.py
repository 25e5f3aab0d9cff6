"""A fake `torchvision.models` for fast_neural_style's vgg.py: a small `vgg16` stand-in
whose `features` keeps torchvision's layer LAYOUT for the 23 layers vgg.py slices
(conv/ReLU pairs and max pools at the same indices: relu1_2 after 4, relu2_2 after 9,
relu3_3 after 16, relu4_3 after 23) with few channels (a real VGG16 has 138 M
parameters). Its "pretrained" weights come from its own generator (seeded 16), never the
global one: the same in every process, whatever `weights`/`pretrained` say (offline).
`VGG16_Weights.IMAGENET1K_V1` exists as a name."""

from __future__ import annotations

import enum

import torch
from torch import nn

# torchvision's "D" configuration up to relu4_3, channels shrunk: M is a max pool
_LAYOUT = [4, 4, "M", 8, 8, "M", 8, 8, 8, "M", 16, 16, 16, "M", 16, 16, 16, "M"]


class VGG16_Weights(enum.Enum):  # noqa: N801 - torchvision's name
    IMAGENET1K_V1 = "IMAGENET1K_V1"
    DEFAULT = "IMAGENET1K_V1"


class VGG(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for item in _LAYOUT:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(channels, int(item), kernel_size=3, padding=1),
                           nn.ReLU(inplace=True)]
                channels = int(item)
        self.features = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def vgg16(pretrained: bool = False, progress: bool = True, weights: object = None,
          **kwargs: object) -> VGG:
    model = VGG()
    generator = torch.Generator().manual_seed(16)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
    return model


def _missing(name: str):  # type: ignore[no-untyped-def]
    def builder(*args: object, **kwargs: object) -> nn.Module:
        raise NotImplementedError(f"the distrun project shim has no torchvision.models.{name}")

    builder.__name__ = name
    return builder


vgg19 = _missing("vgg19")
