"""Fake Omniglot for orobix's prototypical networks, in the run folder (python
make_omniglot.py): `dataset/` as OmniglotDataset finds it after its download (src/ runs
with the default `--dataset_root ../dataset`), so `download()` returns at once:

    dataset/splits/vinyals/{train,val,test}.txt   the classes, ALPHABET/CHARACTER/rotDDD
    dataset/data/ALPHABET/CHARACTER/NAME.png      the drawings (numpy files: the shim's
                                                   PIL.Image.open reads them)

Each character is a 28x28 binary drawing (0/1, as a mode-"1" Omniglot png reads) of its
own, each of its images that drawing with a few pixels flipped; the four rotations of a
character are four classes (omniglot_dataset.find_items). Training: 2 characters x 4
rotations = 8 classes of 5 images; validation and test: 1 character x 4 rotations = 4
classes of 4 images each (an episode of 4 classes x (2 support + 2 query)).
"""

from pathlib import Path

import numpy as np

SPLITS = {  # split: (alphabet, characters, images per character)
    "train": ("Alphabet_of_the_Magi", ["character01", "character02"], 5),
    "val": ("Braille", ["character01"], 4),
    "test": ("Cyrillic", ["character01"], 4),
}
ROTATIONS = ["rot000", "rot090", "rot180", "rot270"]


def main() -> None:
    rng = np.random.default_rng(0)
    root = Path("dataset")
    splits = root / "splits" / "vinyals"
    splits.mkdir(parents=True, exist_ok=True)
    for split, (alphabet, characters, count) in SPLITS.items():
        lines = []
        for character in characters:
            folder = root / "data" / alphabet / character
            folder.mkdir(parents=True, exist_ok=True)
            drawing = (rng.random((28, 28)) < 0.2).astype(np.uint8)
            for i in range(count):
                flips = rng.random((28, 28)) < 0.05
                image = np.where(flips, 1 - drawing, drawing).astype(np.uint8)
                with open(folder / f"{i + 1:04d}_{character[-2:]}.png", "wb") as f:
                    np.save(f, image)
            lines += [f"{alphabet}/{character}/{rot}" for rot in ROTATIONS]
        (splits / f"{split}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
