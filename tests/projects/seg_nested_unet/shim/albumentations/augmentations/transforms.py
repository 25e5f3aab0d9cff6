"""The transforms of albumentations 0.4 that pytorch-nested-unet's train.py names (see
albumentations/__init__.py): Resize and Normalize behave, the random ones are no-ops."""

from __future__ import annotations

import numpy as np


class _Transform:
    def __init__(self, *args, always_apply: bool = False, p: float = 0.5, **kwargs):
        self.p = p

    def __call__(self, force_apply: bool = False, **data):
        return data


class RandomRotate90(_Transform):
    pass


class Flip(_Transform):
    pass


class HorizontalFlip(_Transform):
    pass


class VerticalFlip(_Transform):
    pass


class HueSaturationValue(_Transform):
    pass


class RandomBrightness(_Transform):
    pass


class RandomContrast(_Transform):
    pass


class RandomBrightnessContrast(_Transform):
    pass


def _nearest(array: np.ndarray, height: int, width: int) -> np.ndarray:
    h, w = array.shape[:2]
    rows = (np.arange(height) * h // height).clip(0, h - 1)
    cols = (np.arange(width) * w // width).clip(0, w - 1)
    return array[rows][:, cols].copy()


class Resize(_Transform):
    def __init__(self, height: int, width: int, interpolation: int = 1,
                 always_apply: bool = False, p: float = 1.0):
        self.height, self.width, self.p = int(height), int(width), p

    def __call__(self, force_apply: bool = False, **data):
        out = dict(data)
        for key in ("image", "mask"):
            if key in out and out[key] is not None:
                out[key] = _nearest(np.asarray(out[key]), self.height, self.width)
        return out


class Normalize(_Transform):
    def __init__(self, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                 max_pixel_value: float = 255.0, always_apply: bool = False, p: float = 1.0):
        self.mean = np.asarray(mean, dtype=np.float32) * max_pixel_value
        self.std = np.asarray(std, dtype=np.float32) * max_pixel_value
        self.p = p

    def __call__(self, force_apply: bool = False, **data):
        out = dict(data)
        image = np.asarray(out["image"], dtype=np.float32)
        out["image"] = (image - self.mean) / self.std
        return out
