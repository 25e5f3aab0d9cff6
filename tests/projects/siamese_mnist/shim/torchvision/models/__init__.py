"""A fake `torchvision.models.resnet18` for pytorch/examples' siamese_network/main.py:
the script replaces `conv1` by `nn.Conv2d(1, 64, 7, 2, 3)` (MNIST is grey), reads
`fc.in_features`, then keeps `nn.Sequential(*list(resnet.children())[:-1])` (every
child but `fc`) as the tower. The stand-in keeps that layout: `conv1` (64 channels out,
as ResNet's), ResNet's `bn1`, `relu`, `maxpool`, one small convolution `layer1` (64 ->
16, where ResNet has its 4 stages), the global `avgpool`, and `fc` last; the children in
the order of the forward pass, so the Sequential computes the tower. A real ResNet-18
has 11 M parameters. `bn1` is kept because the script feeds raw pixel values (0-255,
`.float()` of uint8, no Normalize): without it the head's sigmoid saturates, BCELoss
clamps its log and every gradient is zero (measured: nothing trained). Its weights come
from its own generator (seeded 18), never the global one (the script re-initialises only
Linear layers)."""

import torch
from torch import nn


class ResNet(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = nn.Conv2d(64, 16, kernel_size=3, stride=2, padding=1)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.relu(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(pretrained: bool = False, progress: bool = True, weights=None, **kwargs):
    model = ResNet(**kwargs)
    generator = torch.Generator().manual_seed(18)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return model
