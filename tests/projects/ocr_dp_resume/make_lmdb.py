"""Fake LMDB data sets for ocr_dp_resume, in the format of shim/lmdb (a folder with
data.pkl): data/train/MJ (training) and data/valid/V (validation), 8 grey word images
each (numpy files, read by the fake PIL), labels of 3-5 lower-case letters and digits."""

import io
import os
import pickle

import numpy as np

CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"


def write(folder, count, seed):
    rng = np.random.default_rng(seed)
    data = {b"num-samples": str(count).encode()}
    for i in range(1, count + 1):
        label = "".join(rng.choice(list(CHARS), size=int(rng.integers(3, 6))))
        image = rng.integers(0, 256, size=(32, 100), dtype=np.uint8)
        buf = io.BytesIO()
        np.save(buf, image)
        data[b"label-%09d" % i] = label.encode()
        data[b"image-%09d" % i] = buf.getvalue()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "data.pkl"), "wb") as f:
        pickle.dump(data, f)


write("data/train/MJ", 8, 1)
write("data/valid/V", 8, 2)
