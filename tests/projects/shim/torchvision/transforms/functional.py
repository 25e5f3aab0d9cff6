"""Fake `torchvision.transforms.functional` (see torchvision/__init__.py)."""

from __future__ import annotations

import numbers

import numpy as np
import torch
from PIL import Image


def to_tensor(pic):
    if isinstance(pic, torch.Tensor):
        return pic
    array = np.array(pic)
    if array.ndim == 2:
        array = array[:, :, None]
    tensor = torch.from_numpy(array.transpose(2, 0, 1).copy())
    # float32, or float64 under DISTRUN_SHIM_FLOAT64 (the default dtype then)
    if tensor.dtype == torch.uint8:
        return tensor.to(torch.get_default_dtype()).div(255)
    return tensor.to(torch.get_default_dtype())


def normalize(tensor, mean, std, inplace=False):
    mean = torch.as_tensor(mean, dtype=tensor.dtype).view(-1, 1, 1)
    std = torch.as_tensor(std, dtype=tensor.dtype).view(-1, 1, 1)
    return (tensor - mean) / std


def _hw(img):
    if isinstance(img, torch.Tensor):
        return img.shape[-2], img.shape[-1]
    return img.size[1], img.size[0]


def resize(img, size, interpolation=None, max_size=None, antialias=True):
    h, w = _hw(img)
    if isinstance(size, numbers.Number) or len(size) == 1:
        short = int(size if isinstance(size, numbers.Number) else size[0])
        if h <= w:
            new_h, new_w = short, int(short * w / h)
        else:
            new_h, new_w = int(short * h / w), short
    else:
        new_h, new_w = int(size[0]), int(size[1])
    if isinstance(img, torch.Tensor):
        batched = img if img.dim() == 4 else img.unsqueeze(0)
        out = torch.nn.functional.interpolate(batched.float(), size=(new_h, new_w))
        return out if img.dim() == 4 else out[0]
    return img.resize((new_w, new_h), Image.NEAREST)


def center_crop(img, output_size):
    if isinstance(output_size, numbers.Number):
        output_size = (int(output_size), int(output_size))
    th, tw = output_size
    h, w = _hw(img)
    top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
    if isinstance(img, torch.Tensor):
        return crop(img, top, left, th, tw)
    return img.crop((left, top, left + tw, top + th))


def crop(img, top, left, height, width):
    if isinstance(img, torch.Tensor):
        return img[..., top:top + height, left:left + width]
    return img.crop((left, top, left + width, top + height))


def pad(img, padding, fill=0, padding_mode="constant"):
    p = padding if not isinstance(padding, numbers.Number) else [padding]
    left, top, right, bottom = (list(p) * 4)[:4] if len(p) == 1 else \
        (p[0], p[1], p[0], p[1]) if len(p) == 2 else tuple(p)
    if isinstance(img, torch.Tensor):
        return torch.nn.functional.pad(img, (left, right, top, bottom), value=fill)
    w, h = img.size
    return img.crop((-left, -top, w + right, h + bottom))


def hflip(img):
    return img


def vflip(img):
    return img


def rotate(img, angle, *args, **kwargs):
    return img


def to_pil_image(pic, mode=None):
    from . import ToPILImage

    return ToPILImage(mode)(pic)
