"""Fake miniImageNet for dragen1860/MAML-Pytorch, in the run folder (python
make_miniimagenet.py): `miniimagenet/` as MiniImagenet reads it (the knob maml_knobs.mini
points main()'s hard-coded root there):

    miniimagenet/{train,test}.csv        `filename,label` rows, the label the file
                                          name's first 9 characters
    miniimagenet/images/LABEL0000000N.jpg  84x84 RGB images (numpy files: the shim's
                                          PIL.Image.open reads them)

Training: 3 classes of 4 images (an episode of 2 classes x (1 support + 2 query) draws 2
of the 3 classes); test: 2 classes of 3 images. Each class a colour pattern of its own,
each image that pattern with noise.
"""

from pathlib import Path

import numpy as np

SPLITS = {"train": (["n01532829", "n01558993", "n01704323"], 4),
          "test": (["n01930112", "n01981276"], 3)}


def main() -> None:
    rng = np.random.default_rng(0)
    root = Path("miniimagenet")
    (root / "images").mkdir(parents=True, exist_ok=True)
    for split, (labels, count) in SPLITS.items():
        rows = ["filename,label"]
        for label in labels:
            pattern = rng.integers(0, 256, (84, 84, 3))
            for i in range(count):
                noise = rng.integers(-40, 41, (84, 84, 3))
                image = np.clip(pattern + noise, 0, 255).astype(np.uint8)
                name = f"{label}{i + 1:08d}.jpg"
                with open(root / "images" / name, "wb") as f:
                    np.save(f, image)
                rows.append(f"{name},{label}")
        (root / f"{split}.csv").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
