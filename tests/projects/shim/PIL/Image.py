"""Fake `PIL.Image` (see PIL/__init__.py)."""

from __future__ import annotations

import builtins

import numpy as np

NEAREST = 0
BOX = 4
BILINEAR = 2
HAMMING = 5
BICUBIC = 3
LANCZOS = 1
ANTIALIAS = LANCZOS


class Resampling:
    NEAREST = NEAREST
    BOX = BOX
    BILINEAR = BILINEAR
    HAMMING = HAMMING
    BICUBIC = BICUBIC
    LANCZOS = LANCZOS


def _mode_of(array: np.ndarray) -> str:
    if array.ndim == 2:
        return "L"
    return {3: "RGB", 4: "RGBA"}.get(array.shape[2], "RGB")


class Image:
    def __init__(self, array: np.ndarray, mode: str | None = None):
        self._array = np.ascontiguousarray(array)
        self.mode = mode or _mode_of(self._array)

    @property
    def size(self) -> tuple[int, int]:
        return (self._array.shape[1], self._array.shape[0])

    @property
    def width(self) -> int:
        return self.size[0]

    @property
    def height(self) -> int:
        return self.size[1]

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)

    def copy(self) -> Image:
        return Image(self._array.copy(), self.mode)

    def convert(self, mode: str) -> Image:
        a = self._array
        if mode == "L":
            if a.ndim == 3:
                a = a[..., :3].mean(axis=2).astype(a.dtype)
            return Image(a, "L")
        if a.ndim == 2:
            a = np.stack([a, a, a], axis=2)
        return Image(a[..., :3], mode)

    def split(self) -> tuple[Image, ...]:
        if self._array.ndim == 2:
            return (self.copy(),)
        return tuple(Image(self._array[..., i], "L") for i in range(self._array.shape[2]))

    def crop(self, box) -> Image:
        left, top, right, bottom = (int(round(v)) for v in box)
        h, w = self._array.shape[:2]
        out_shape = (bottom - top, right - left) + self._array.shape[2:]
        out = np.zeros(out_shape, dtype=self._array.dtype)
        src_top, src_left = max(top, 0), max(left, 0)
        src_bottom, src_right = min(bottom, h), min(right, w)
        if src_bottom > src_top and src_right > src_left:
            out[src_top - top:src_bottom - top, src_left - left:src_right - left] = \
                self._array[src_top:src_bottom, src_left:src_right]
        return Image(out, self.mode)

    def resize(self, size, resample=None, *args, **kwargs) -> Image:
        new_w, new_h = (int(v) for v in size)
        h, w = self._array.shape[:2]
        if (new_w, new_h) == (w, h):
            return self.copy()
        rows = (np.arange(new_h) * h // new_h).clip(0, h - 1)
        cols = (np.arange(new_w) * w // new_w).clip(0, w - 1)
        return Image(self._array[rows][:, cols], self.mode)

    def rotate(self, angle, resample=None, expand=0, *args, **kwargs) -> Image:
        """Pillow's counter-clockwise rotation, for multiples of 90 degrees only (the size
        kept where the image is square, as Pillow's `expand=0`)."""
        turns, rest = divmod(float(angle), 90.0)
        if rest:
            raise NotImplementedError("fake PIL: rotate by a multiple of 90 degrees only")
        return Image(np.rot90(self._array, int(turns) % 4).copy(), self.mode)

    def transpose(self, method) -> Image:
        return Image(self._array[:, ::-1].copy(), self.mode)

    def save(self, fp, *args, **kwargs) -> None:
        with builtins.open(fp, "wb") if isinstance(fp, (str, bytes)) or hasattr(fp, "__fspath__") \
                else _NoClose(fp) as f:
            np.save(f, self._array)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self) -> None:
        pass


class _NoClose:
    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self.f

    def __exit__(self, *exc):
        return False


def fromarray(array, mode: str | None = None) -> Image:
    return Image(np.asarray(array), mode)


def open(fp, mode="r", *args, **kwargs) -> Image:  # noqa: A001 (Pillow's name)
    return Image(np.load(fp, allow_pickle=False))


def new(mode, size, color=0) -> Image:
    w, h = size
    shape = (h, w) if mode in ("L", "1", "P") else (h, w, 3)
    return Image(np.full(shape, color, dtype=np.uint8), mode)
