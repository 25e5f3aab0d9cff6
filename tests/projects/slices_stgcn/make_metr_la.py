"""Fake METR-LA for slices_stgcn: data/adj_mat.npy (a 4-sensor road graph) and
data/node_values.npy (100 five-minute steps x 4 sensors x 2 features: speed, time of
day), so that utils.load_metr_la_data() does not open data/METR-LA.zip (LFS, 16 MB).
100 steps: 60 for training (46 windows of 12 + 3), 20 for validation, 20 for test."""

import os

import numpy as np

rng = np.random.default_rng(0)
os.makedirs("data", exist_ok=True)
adj = np.array([[0, 0.8, 0, 0.3], [0.8, 0, 0.5, 0], [0, 0.5, 0, 0.9], [0.3, 0, 0.9, 0]],
               dtype=np.float32)
np.save("data/adj_mat.npy", adj)
t = np.arange(100, dtype=np.float32)
speed = 60 + 10 * np.sin(t[:, None] / 7.0 + np.arange(4)[None, :]) + rng.normal(0, 2, (100, 4))
day = np.repeat(((t % 288) / 288.0)[:, None], 4, axis=1)
np.save("data/node_values.npy", np.stack([speed, day], axis=2).astype(np.float32))
