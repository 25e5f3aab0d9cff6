"""Fake ShapeNet part data (shapenetcore_partanno_segmentation_benchmark_v0 layout).

Writes shapenet/ in the run folder: synsetoffset2category.txt with four categories of
the repository's misc/num_seg_classes.txt (Airplane first: ShapeNetDataset reads the
number of part classes of the first category), train_test_split/shuffled_{train,test}_
file_list.json ("shape_data/<synset>/<uuid>"), and for each cloud <synset>/points/
<uuid>.pts (64 lines "x y z") and <synset>/points_label/<uuid>.seg (64 part labels).
16 training clouds (4 per category), 8 test clouds; each category a noisy ellipsoid of
its own proportions.
"""

import json
import os

import numpy as np

CATS = [("Airplane", "02691156"), ("Bag", "02773838"), ("Cap", "02954340"),
        ("Car", "02958343")]
POINTS = 64
SIZES = {"train": 16, "test": 8}


def main():
    root = "shapenet"
    os.makedirs(os.path.join(root, "train_test_split"), exist_ok=True)
    with open(os.path.join(root, "synsetoffset2category.txt"), "w") as f:
        f.write("".join(f"{name}\t{synset}\n" for name, synset in CATS))
    rng = np.random.default_rng(17)
    for split, size in SIZES.items():
        files = []
        for i in range(size):
            c = i % len(CATS)
            synset = CATS[c][1]
            uuid = f"{split}{i:02d}{'f' * 8}"
            for sub in ("points", "points_label"):
                os.makedirs(os.path.join(root, synset, sub), exist_ok=True)
            axes = np.array([1.0 + 0.3 * c, 1.0, 0.5 + 0.2 * c])
            xyz = rng.normal(size=(POINTS, 3))
            xyz = xyz / np.linalg.norm(xyz, axis=1, keepdims=True) * axes
            xyz += rng.normal(scale=0.05, size=xyz.shape)
            np.savetxt(os.path.join(root, synset, "points", uuid + ".pts"), xyz, fmt="%.5f")
            seg = 1 + (xyz[:, 0] > 0).astype(int)
            np.savetxt(os.path.join(root, synset, "points_label", uuid + ".seg"), seg, fmt="%d")
            files.append(f"shape_data/{synset}/{uuid}")
        with open(os.path.join(root, "train_test_split",
                               f"shuffled_{split}_file_list.json"), "w") as f:
            json.dump(files, f)


if __name__ == "__main__":
    main()
