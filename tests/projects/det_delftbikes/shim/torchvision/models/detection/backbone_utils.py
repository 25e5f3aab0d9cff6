"""`resnet_fpn_backbone(name, pretrained)`: a small convolutional stand-in (no BatchNorm,
weights from the global generator, seeded by the shared shim): a stride-2 3x3
convolution, ReLU, average pooling to 4x4; `out_channels` as torchvision's."""

from torch import nn


class _Backbone(nn.Sequential):
    def __init__(self, channels: int = 8) -> None:
        super().__init__(nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.out_channels = channels * 16


def resnet_fpn_backbone(backbone_name, pretrained=False, *args, **kwargs):
    if pretrained:
        raise RuntimeError("the projects' shim has no pretrained backbone")
    return _Backbone()
