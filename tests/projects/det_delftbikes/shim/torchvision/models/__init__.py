"""`torchvision.models` for det_delftbikes: `detection` below (the shared shim's
builders are not needed here)."""

from torchvision.models import detection  # noqa: F401
