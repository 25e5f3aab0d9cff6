"""Fake `torchvision.models.vgg`: `vgg16`/`vgg19` exist so that modules importing them
load; calling one fails loudly (no weights and no network here)."""


def _unavailable(name):
    def build(*args, **kwargs):
        raise NotImplementedError(f"the projects' shim has no torchvision.models.{name}")

    build.__name__ = name
    return build


vgg16 = _unavailable("vgg16")
vgg19 = _unavailable("vgg19")
