"""Fake `torchvision.datasets.folder` (imported by DomainBed's datasets.py)."""

from PIL import Image

from . import ImageFolder  # noqa: F401

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def default_loader(path):
    return Image.open(path)


pil_loader = default_loader
