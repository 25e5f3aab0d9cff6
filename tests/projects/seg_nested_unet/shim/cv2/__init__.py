"""A stand-in for OpenCV's `cv2` (opencv-python is not installed): the few functions the
segmentation projects' Datasets call, on the numpy arrays the data makers write with
`np.save` under image names (`.png`, `.jpg`). seg_nested_unet (dataset.py: `imread`,
`IMREAD_GRAYSCALE`) and seg_yassouali (base/base_dataset.py: `resize`, `warpAffine`,
`getRotationMatrix2D`, `copyMakeBorder`, `GaussianBlur`, `setNumThreads`; its default
augmentations are off in the descriptor's config, these only have to exist and be sane).
Resizing is nearest-neighbour whatever the interpolation asked."""

from __future__ import annotations

import builtins
import os

import numpy as np

IMREAD_UNCHANGED = -1
IMREAD_GRAYSCALE = 0
IMREAD_COLOR = 1
INTER_NEAREST = 0
INTER_LINEAR = 1
INTER_CUBIC = 2
INTER_AREA = 3
BORDER_CONSTANT = 0
BORDER_REPLICATE = 1
BORDER_REFLECT = 2
BORDER_REFLECT_101 = 4
BORDER_DEFAULT = BORDER_REFLECT_101
COLOR_BGR2RGB = 4
COLOR_RGB2BGR = 4
COLOR_BGR2GRAY = 6


def setNumThreads(n: int) -> None:  # noqa: N802 - OpenCV's names
    pass


def imread(path, flags: int = IMREAD_COLOR):
    """The array saved at `path` (None when there is no such file, as OpenCV answers);
    IMREAD_GRAYSCALE gives a 2-D array, IMREAD_COLOR three channels."""
    if not os.path.isfile(path):
        return None
    with builtins.open(path, "rb") as f:
        array = np.load(f, allow_pickle=False)
    if flags == IMREAD_GRAYSCALE and array.ndim == 3:
        array = array[..., :3].mean(axis=2).astype(array.dtype)
    elif flags == IMREAD_COLOR and array.ndim == 2:
        array = np.stack([array] * 3, axis=2)
    return array


def imwrite(path, array, *args) -> bool:
    with builtins.open(path, "wb") as f:
        np.save(f, np.asarray(array))
    return True


def cvtColor(array, code):  # noqa: N802
    array = np.asarray(array)
    if code == COLOR_BGR2GRAY:
        return array[..., :3].mean(axis=2).astype(array.dtype)
    return array[..., ::-1].copy() if array.ndim == 3 else array


def resize(array, dsize, fx=None, fy=None, interpolation=INTER_LINEAR):
    array = np.asarray(array)
    h, w = array.shape[:2]
    new_w, new_h = (int(v) for v in dsize) if dsize else (int(w * fx), int(h * fy))
    rows = (np.arange(new_h) * h // new_h).clip(0, h - 1)
    cols = (np.arange(new_w) * w // new_w).clip(0, w - 1)
    return array[rows][:, cols].copy()


def getRotationMatrix2D(center, angle, scale):  # noqa: N802
    a = np.deg2rad(angle)
    alpha, beta = scale * np.cos(a), scale * np.sin(a)
    cx, cy = center
    return np.array([[alpha, beta, (1 - alpha) * cx - beta * cy],
                     [-beta, alpha, beta * cx + (1 - alpha) * cy]])


def warpAffine(array, matrix, dsize, flags=INTER_LINEAR, borderMode=BORDER_CONSTANT,  # noqa: N802,N803
               borderValue=0):  # noqa: N803
    """Nearest-neighbour inverse mapping, zeros outside."""
    array = np.asarray(array)
    w, h = (int(v) for v in dsize)
    full = np.vstack([np.asarray(matrix, dtype=float), [0.0, 0.0, 1.0]])
    inverse = np.linalg.inv(full)
    ys, xs = np.mgrid[0:h, 0:w]
    src_x = np.rint(inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]).astype(int)
    src_y = np.rint(inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]).astype(int)
    inside = (src_x >= 0) & (src_x < array.shape[1]) & (src_y >= 0) & (src_y < array.shape[0])
    out = np.zeros((h, w) + array.shape[2:], dtype=array.dtype)
    out[inside] = array[src_y[inside], src_x[inside]]
    return out


def copyMakeBorder(array, top, bottom, left, right, borderType=BORDER_CONSTANT, value=0):  # noqa: N802,N803
    array = np.asarray(array)
    pad = ((top, bottom), (left, right)) + ((0, 0),) * (array.ndim - 2)
    if borderType == BORDER_CONSTANT:
        return np.pad(array, pad, mode="constant", constant_values=value)
    return np.pad(array, pad, mode="reflect")


def GaussianBlur(array, ksize, sigmaX=0, sigmaY=0, borderType=BORDER_DEFAULT):  # noqa: N802,N803
    return np.asarray(array).copy()
