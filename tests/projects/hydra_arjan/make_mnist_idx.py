"""Fake data of hydra_arjan (run in the run folder): data/raw/{train,t10k}-{images-idx3,
labels-idx1}-ubyte.gz, in the IDX layout ds/load_data.py parses (two zero bytes, the type
byte 0x08, the number of dimensions, big-endian sizes, then the bytes), gzip'd.

8 training images (the whole set is one batch of 8 on one process, 4 a rank on two) and
8 test images, 28x28, drawn from a fixed generator so both runs read the same files."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

ROOT = Path("data/raw")


def write(path: Path, array: np.ndarray) -> None:
    header = b"\x00\x00\x08" + bytes([array.ndim]) + b"".join(
        struct.pack(">I", n) for n in array.shape)
    with gzip.open(path, "wb") as fp:
        fp.write(header + array.astype(np.uint8).tobytes())


def main() -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(26)
    for prefix, count in (("train", 8), ("t10k", 8)):
        write(ROOT / f"{prefix}-images-idx3-ubyte.gz",
              rng.integers(0, 256, size=(count, 28, 28)))
        write(ROOT / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, size=count))


if __name__ == "__main__":
    main()
