"""Fake `torchvision.models`: importable (projects import model builders they may not
call); a builder called says the shim has no pretrained networks."""

from torchvision.models import inception  # noqa: F401
from torchvision.models.inception import inception_v3  # noqa: F401
from torchvision.models.vgg import vgg16, vgg19  # noqa: F401
