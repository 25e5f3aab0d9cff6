"""Fake `torchvision.models.inception`: the Inception blocks exist as classes (pytorch-ddpm's
score/inception.py subclasses InceptionA/C/E when it is imported); building one, or
calling `inception_v3`, fails loudly (no weights and no network here)."""

from torch import nn

from torchvision.models.vgg import _unavailable


class _UnavailableBlock(nn.Module):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            f"the projects' shim has no torchvision.models.inception.{type(self).__name__}")


class InceptionA(_UnavailableBlock):
    pass


class InceptionC(_UnavailableBlock):
    pass


class InceptionE(_UnavailableBlock):
    pass


class Inception3(_UnavailableBlock):
    pass


inception_v3 = _unavailable("inception_v3")
