"""Fake nuclei images for pytorch-nested-unet, in the run folder (python make_dsb.py):
the layout its preprocess_dsb2018.py writes and train.py reads (`--dataset dsb2018_96`,
`--img_ext .png --mask_ext .png`, `--num_classes 1`):

    inputs/dsb2018_96/images/ID.png      16x16x3 uint8 (numpy files: the cv2 shim reads them)
    inputs/dsb2018_96/masks/0/ID.png     16x16 uint8, 0 or 255

Ten images: train_test_split(test_size=0.2, random_state=41) keeps 8 for training (one
batch of 8, or 4 per rank) and 2 for validation. Each image holds one or two bright
squares on noise; the mask marks them, so the IoU moves as the network learns.
"""

from pathlib import Path

import numpy as np

COUNT, SIZE = 10, 16


def main() -> None:
    rng = np.random.default_rng(0)
    root = Path("inputs") / "dsb2018_96"
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks" / "0").mkdir(parents=True, exist_ok=True)
    for i in range(COUNT):
        mask = np.zeros((SIZE, SIZE), dtype=np.uint8)
        for _ in range(1 + i % 2):
            y, x = rng.integers(0, SIZE - 5, 2)
            side = int(rng.integers(3, 6))
            mask[y:y + side, x:x + side] = 255
        noise = rng.integers(0, 90, (SIZE, SIZE, 3))
        image = np.where(mask[..., None] > 0, 150 + noise, noise).astype(np.uint8)
        name = f"{i:04x}a{i * 7919 % 997:03d}.png"   # hex ids, as the DSB's
        with open(root / "images" / name, "wb") as f:
            np.save(f, image)
        with open(root / "masks" / "0" / name, "wb") as f:
            np.save(f, mask)


if __name__ == "__main__":
    main()
