"""A fake `torchvision.models.resnet18`: the shim has no pretrained networks, and a real
ResNet-18 (11 M parameters, BatchNorm) is far over the corpus's time budget on a CPU. The
stand-in keeps what the fine-tuning scripts touch: an `nn.Module` with a final
`fc = nn.Linear(in_features, num_classes)` that the script replaces, fed by a global
average pool (so any image size works). No BatchNorm, no dropout. Its "pretrained"
weights come from its own generator (seeded 18), never the global one: the same in every
process, pretrained or not."""

import torch
from torch import nn


class ResNet(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=4, padding=3, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.relu(self.conv1(x))
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
