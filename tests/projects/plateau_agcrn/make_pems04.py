"""Fake PeMSD4 for plateau_agcrn: data/PeMSD4/pems04.npz with `data` of shape (50, 4, 3)
(time steps, sensors, features; the script reads feature 0, the traffic flow), written in
the run folder (the repository root; Run.py reads ../data from model/). The first 20
steps (the training part) follow a daily-like wave; the last 30 (validation, test) the
same wave with its level shifted, so that training soon stops improving the validation
loss and the early stop is reached within a few epochs."""

import os

import numpy as np

rng = np.random.default_rng(4)
steps, sensors = 50, 4
t = np.arange(steps)[:, None]
flow = 100 + 30 * np.sin(2 * np.pi * t / 12 + np.arange(sensors)[None, :])
flow[20:] += 40
flow += rng.normal(0, 3, size=flow.shape)
data = np.stack([flow, flow / 10, flow / 100], axis=-1).astype(np.float64)
os.makedirs("data/PeMSD4", exist_ok=True)
np.savez("data/PeMSD4/pems04.npz", data=data)
