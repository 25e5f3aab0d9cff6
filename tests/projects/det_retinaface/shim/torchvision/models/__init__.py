"""`torchvision.models` for the detection projects: the shared shim's builders (each
says it has no pretrained network when called) and `_utils`, `detection` below."""

from torchvision.models import _utils, detection  # noqa: F401


def _no_network(name):
    def build(*args, **kwargs):
        raise RuntimeError(f"the projects' shim has no torchvision.models.{name}")
    build.__name__ = name
    return build


resnet50 = _no_network("resnet50")   # RetinaFace's Resnet50 branch (not the one trained)
