"""A stand-in for OpenCV's `cv2` (opencv-python is not installed): what the detection
projects' Datasets and augmentations call, on the numpy arrays their data makers write
with `np.save` under image names (`.jpg`). `imread` (colour: HxWx3 uint8), `resize`
(nearest-neighbour whatever the interpolation asked), `cvtColor` between BGR/RGB and HSV
with OpenCV's conventions (uint8: H in [0, 180), S and V in [0, 255]; float32: H in
[0, 360), S in [0, 1], V in the input's range) and the channel swaps. det_retinaface
(data/wider_face.py, data/data_augment.py) and det_ssd_voc (vision/datasets/voc_dataset.py,
vision/transforms/transforms.py)."""

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
INTER_LANCZOS4 = 4
COLOR_BGR2RGB = 4
COLOR_RGB2BGR = 4
COLOR_BGR2GRAY = 6
COLOR_BGR2HSV = 40
COLOR_RGB2HSV = 41
COLOR_HSV2BGR = 54
COLOR_HSV2RGB = 55


def setNumThreads(n: int) -> None:  # noqa: N802 - OpenCV's names
    pass


def imread(path, flags: int = IMREAD_COLOR):
    """The array saved at `path` (None when there is no such file, as OpenCV answers)."""
    path = str(path)
    if not os.path.isfile(path):
        return None
    with builtins.open(path, "rb") as f:
        array = np.load(f, allow_pickle=False)
    if flags == IMREAD_GRAYSCALE and array.ndim == 3:
        array = array[..., :3].mean(axis=2).astype(array.dtype)
    elif flags != IMREAD_GRAYSCALE and array.ndim == 2:
        array = np.stack([array] * 3, axis=2)
    return array


def imwrite(path, array, *args) -> bool:
    with builtins.open(str(path), "wb") as f:
        np.save(f, np.asarray(array))
    return True


def _rgb_to_hsv(rgb: np.ndarray, integer: bool) -> np.ndarray:
    x = rgb.astype(np.float64)
    if integer:
        x = x / 255.0
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    v = x.max(axis=-1)
    c = v - x.min(axis=-1)
    s = np.where(v > 0, c / np.where(v > 0, v, 1), 0.0)
    safe = np.where(c > 0, c, 1)
    h = np.where(v == r, (g - b) / safe, np.where(v == g, 2 + (b - r) / safe, 4 + (r - g) / safe))
    h = np.where(c > 0, (h * 60.0) % 360.0, 0.0)
    if integer:
        out = np.stack([h / 2.0, s * 255.0, v * 255.0], axis=-1)
        return np.clip(np.rint(out), 0, 255).astype(rgb.dtype)
    return np.stack([h, s, v], axis=-1).astype(rgb.dtype)


def _hsv_to_rgb(hsv: np.ndarray, integer: bool) -> np.ndarray:
    x = hsv.astype(np.float64)
    if integer:
        h, s, v = x[..., 0] * 2.0, x[..., 1] / 255.0, x[..., 2] / 255.0
    else:
        h, s, v = x[..., 0], x[..., 1], x[..., 2]
    h = (h % 360.0) / 60.0
    c = v * s
    m = v - c
    k = c * (1 - np.abs(h % 2 - 1))
    sector = np.floor(h).astype(int) % 6
    zeros = np.zeros_like(c)
    table = [(c, k, zeros), (k, c, zeros), (zeros, c, k),
             (zeros, k, c), (k, zeros, c), (c, zeros, k)]
    out = np.zeros(x.shape, dtype=np.float64)
    for i, (rr, gg, bb) in enumerate(table):
        here = sector == i
        out[..., 0] = np.where(here, rr + m, out[..., 0])
        out[..., 1] = np.where(here, gg + m, out[..., 1])
        out[..., 2] = np.where(here, bb + m, out[..., 2])
    if integer:
        return np.clip(np.rint(out * 255.0), 0, 255).astype(hsv.dtype)
    return out.astype(hsv.dtype)


def cvtColor(array, code):  # noqa: N802
    array = np.asarray(array)
    integer = np.issubdtype(array.dtype, np.integer)
    if code == COLOR_BGR2GRAY:
        return array[..., :3].mean(axis=2).astype(array.dtype)
    if code == COLOR_BGR2HSV:
        return _rgb_to_hsv(array[..., ::-1], integer)
    if code == COLOR_RGB2HSV:
        return _rgb_to_hsv(array, integer)
    if code == COLOR_HSV2BGR:
        return _hsv_to_rgb(array, integer)[..., ::-1].copy()
    if code == COLOR_HSV2RGB:
        return _hsv_to_rgb(array, integer)
    return array[..., ::-1].copy() if array.ndim == 3 else array   # BGR <-> RGB


def resize(array, dsize, fx=None, fy=None, interpolation=INTER_LINEAR):
    array = np.asarray(array)
    h, w = array.shape[:2]
    new_w, new_h = (int(v) for v in dsize) if dsize else (int(w * fx), int(h * fy))
    rows = (np.arange(new_h) * h // new_h).clip(0, h - 1)
    cols = (np.arange(new_w) * w // new_w).clip(0, w - 1)
    return array[rows][:, cols].copy()
