"""Fake retina images for Retina-Blood-Vessel-Segmentation-in-PyTorch (python
make_drive.py, in the run folder): the layout upstream's data_aug.py writes and
UNET/train.py reads from `../new_data` (run from UNET/):

    new_data/train/image/NAME.png   32x32x3 uint8 (numpy files: the cv2 shim reads them)
    new_data/train/mask/NAME.png    32x32 uint8, 0 or 255
    new_data/test/...               the same

Four training pairs (one batch of 4, or 2 per rank) and two test pairs. Each image holds
thin bright "vessels" (a row and a column) on noise; the mask marks them. The masks
differ in how much foreground they hold, so a Dice over the whole batch is not the mean
of the halves' Dice.
"""

from pathlib import Path

import numpy as np

SIZE = 32


def main() -> None:
    rng = np.random.default_rng(0)
    for split, count in (("train", 4), ("test", 2)):
        (Path("new_data") / split / "image").mkdir(parents=True, exist_ok=True)
        (Path("new_data") / split / "mask").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            mask = np.zeros((SIZE, SIZE), dtype=np.uint8)
            for _ in range(1 + 2 * i):
                y, x = rng.integers(2, SIZE - 2, 2)
                mask[y, :] = 255 if rng.random() < 0.5 else mask[y, :]
                mask[:, x] = 255
            noise = rng.integers(0, 90, (SIZE, SIZE, 3))
            image = np.where(mask[..., None] > 0, 140 + noise, noise).astype(np.uint8)
            name = f"{21 + i}_training_{i}.png"
            with open(Path("new_data") / split / "image" / name, "wb") as f:
                np.save(f, image)
            with open(Path("new_data") / split / "mask" / name, "wb") as f:
                np.save(f, mask)


if __name__ == "__main__":
    main()
