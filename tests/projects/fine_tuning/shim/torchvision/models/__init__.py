"""A fake `torchvision.models` for fine-tuning.pytorch's main.py: a small `alexnet`
stand-in (a real AlexNet has 61 M parameters: 50 hard-coded epochs of it are far over
the corpus's time budget on a CPU). It keeps what main.py touches with `--net_type
alexnet --resetClassifier`: `classifier` an `nn.Sequential` of 7 layers laid out as
torchvision's (Dropout, Linear, ReLU, Dropout, Linear, ReLU, Linear) whose last,
`classifier[6]`, has `in_features` (main.py pops it and appends `nn.Linear(num_ftrs,
len(dset_classes))`), fed by `features` and an adaptive average pool (any image size
works). No BatchNorm; its dropouts are the shared shim's knob's (DISTRUN_SHIM_NO_DROPOUT).
Its "pretrained" weights come from its own generator (seeded 61), never the global one:
the same in every process, pretrained or not. The other builders main.py names
(vgg11/13/16/19, squeezenet1_0) say the shim has no such network."""

import torch
from torch import nn


class AlexNet(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(8, 16, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(16 * 2 * 2, 32),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(32, 32),
            nn.ReLU(inplace=True),
            nn.Linear(32, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def alexnet(pretrained: bool = False, progress: bool = True, weights=None, **kwargs):
    model = AlexNet(**kwargs)
    generator = torch.Generator().manual_seed(61)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return model


def _missing(name):
    def builder(*args, **kwargs):
        raise NotImplementedError(f"the distrun project shim has no torchvision.models.{name}")

    builder.__name__ = name
    return builder


vgg11, vgg13, vgg16, vgg19 = (_missing(n) for n in ("vgg11", "vgg13", "vgg16", "vgg19"))
squeezenet1_0 = _missing("squeezenet1_0")
