"""Fake `torchvision.models`: importable (projects import model builders they may not
call); a builder called says the shim has no pretrained networks."""

from torchvision.models.vgg import vgg16, vgg19  # noqa: F401
