"""Fake OpenCV for pytorch-domain-adaptation's data.py (BSDS500.__getitem__): only
`imread(path, cv2.IMREAD_COLOR)`, reading the numpy file make_wdgrl_data.py writes under
a `.jpg` name (an H x W x 3 uint8 array, as OpenCV returns; the channel order does not
matter to a fake background)."""

from __future__ import annotations

import numpy as np

IMREAD_COLOR = 1
IMREAD_GRAYSCALE = 0
IMREAD_UNCHANGED = -1


def imread(path, flags=IMREAD_COLOR):
    try:
        with open(path, "rb") as f:
            image = np.load(f)
    except (OSError, ValueError):
        return None  # OpenCV's answer for a file it cannot read
    if flags == IMREAD_COLOR and image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return image
