"""Fake `torchvision.transforms` (see torchvision/__init__.py)."""

from __future__ import annotations

import numbers

import numpy as np
import torch
from PIL import Image

from . import functional  # noqa: F401


def _pair(size):
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    if len(size) == 1:
        return int(size[0]), int(size[0])
    return int(size[0]), int(size[1])


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class ToTensor:
    def __call__(self, pic):
        return functional.to_tensor(pic)


class PILToTensor:
    def __call__(self, pic):
        array = np.array(pic)
        if array.ndim == 2:
            array = array[:, :, None]
        return torch.from_numpy(array.transpose(2, 0, 1).copy())


class ToPILImage:
    def __init__(self, mode=None):
        self.mode = mode

    def __call__(self, pic):
        if isinstance(pic, torch.Tensor):
            array = (pic.detach().cpu().clamp(0, 1) * 255).to(torch.uint8).numpy()
            array = array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)
            return Image.fromarray(array)
        return Image.fromarray(np.asarray(pic))


class Normalize:
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std = mean, std

    def __call__(self, tensor):
        return functional.normalize(tensor, self.mean, self.std)


class Resize:
    def __init__(self, size, interpolation=None, max_size=None, antialias=True):
        self.size = size

    def __call__(self, img):
        return functional.resize(img, self.size)


Scale = Resize


class CenterCrop:
    def __init__(self, size):
        self.size = _pair(size)

    def __call__(self, img):
        return functional.center_crop(img, self.size)


class Pad:
    def __init__(self, padding, fill=0, padding_mode="constant"):
        self.padding = padding

    def __call__(self, img):
        return functional.pad(img, self.padding)


class Grayscale:
    def __init__(self, num_output_channels=1):
        self.num_output_channels = num_output_channels

    def __call__(self, img):
        img = img.convert("L")
        if self.num_output_channels == 3:
            img = img.convert("RGB")
        return img


class Lambda:
    def __init__(self, lambd):
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)


class _Identity:
    """A random transform, made a deterministic no-op."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, img, *args):
        return img if not args else (img, *args)


class RandomCrop(_Identity):
    pass


class RandomHorizontalFlip(_Identity):
    pass


class RandomVerticalFlip(_Identity):
    pass


class RandomRotation(_Identity):
    pass


class RandomAffine(_Identity):
    pass


class ColorJitter(_Identity):
    pass


class RandomGrayscale(_Identity):
    pass


class RandomErasing(_Identity):
    pass


class RandomApply(_Identity):
    pass


class AutoAugment(_Identity):
    pass


class RandAugment(_Identity):
    pass


class RandomResizedCrop:
    """Deterministic: a plain resize to the requested size."""

    def __init__(self, size, *args, **kwargs):
        self.size = _pair(size)

    def __call__(self, img):
        return functional.resize(img, self.size)


RandomSizedCrop = RandomResizedCrop  # its name before torchvision 0.2.1 (2018 scripts)


class InterpolationMode:
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"
