"""Small `torchvision.models.resnet18` / `resnet50` stand-ins for sthalles/SimCLR:
models/resnet_simclr.py builds BOTH (`pretrained=False, num_classes=out_dim`) in a dict,
keeps one as the backbone, reads `backbone.fc.in_features` and puts an MLP head in
front of `fc`; run.py lists the lower-case callables of this module as `--arch`
choices. The stand-ins keep that interface (`fc` last, called last in forward): a
convolution, ReLU, global average pooling, `fc`; NO BatchNorm (a real ResNet's
BatchNorm would make the ranks' statistics differ, a question apart from the
contrastive loss this project is about). Weights from their own generator (seeded by
depth), never the global one. A real ResNet-18 has 11 M parameters."""

import torch
from torch import nn


class ResNet(nn.Module):
    def __init__(self, width: int, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=2, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = torch.flatten(self.avgpool(self.relu(self.conv1(x))), 1)
        return self.fc(x)


def _build(depth: int, width: int, **kwargs) -> ResNet:
    kwargs.pop("pretrained", None)
    kwargs.pop("progress", None)
    kwargs.pop("weights", None)
    model = ResNet(width, **kwargs)
    generator = torch.Generator().manual_seed(depth)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return model


def resnet18(**kwargs) -> ResNet:
    return _build(18, 16, **kwargs)


def resnet50(**kwargs) -> ResNet:
    return _build(50, 32, **kwargs)
