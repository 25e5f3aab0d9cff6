"""Fake ModelNet10 (modelnet40_normal_resampled layout) for pc_pointnet2.

Writes data/modelnet40_normal_resampled/ in the run folder: the ten ModelNet10 shape
names, 16 training and 10 test clouds (ids `<name>_<nnnn>`), each a text file of 64
lines "x,y,z,nx,ny,nz" (ModelNetDataLoader reads them with `np.loadtxt(delimiter=',')`).
Each class is a noisy ellipsoid of its own proportions, from a generator of its own.
"""

import os

import numpy as np

NAMES = ["bathtub", "bed", "chair", "desk", "dresser",
         "monitor", "night_stand", "sofa", "table", "toilet"]
POINTS = 64
TRAIN = 16
TEST = 10


def cloud(rng, cls):
    axes = np.array([1.0 + 0.2 * (cls % 3), 1.0 + 0.15 * (cls % 4), 0.6 + 0.1 * cls])
    normals = rng.normal(size=(POINTS, 3))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    xyz = normals * axes + rng.normal(scale=0.05, size=(POINTS, 3))
    return np.concatenate([xyz, normals], axis=1)


def main():
    root = os.path.join("data", "modelnet40_normal_resampled")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(17)
    with open(os.path.join(root, "modelnet10_shape_names.txt"), "w") as f:
        f.write("".join(name + "\n" for name in NAMES))
    counts = {name: 0 for name in NAMES}
    for split, size in (("train", TRAIN), ("test", TEST)):
        ids = []
        for i in range(size):
            cls = i % len(NAMES)
            name = NAMES[cls]
            counts[name] += 1
            shape_id = f"{name}_{counts[name]:04d}"
            os.makedirs(os.path.join(root, name), exist_ok=True)
            np.savetxt(os.path.join(root, name, shape_id + ".txt"), cloud(rng, cls),
                       delimiter=",", fmt="%.6f")
            ids.append(shape_id)
        with open(os.path.join(root, f"modelnet10_{split}.txt"), "w") as f:
            f.write("".join(i + "\n" for i in ids))


if __name__ == "__main__":
    main()
