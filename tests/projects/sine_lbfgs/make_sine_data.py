"""Fake data of sine_lbfgs (run in the run folder): time_sequence_prediction/traindata.pt,
what upstream's generate_sine_wave.py writes (a float64 numpy array pickled by
torch.save: one sine wave a row, each shifted by a random whole number of steps), made
small: 7 waves of 60 points (train.py keeps rows 0-2 for its test, trains on rows 3-6),
where upstream's are 100 waves of 1000 points (one LBFGS step of train.py on them takes
over two minutes here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

WAVES, POINTS, PERIOD = 7, 60, 20


def main() -> None:
    rng = np.random.default_rng(25)
    shifts = rng.integers(-4 * PERIOD, 4 * PERIOD, size=(WAVES, 1))
    steps = np.arange(POINTS)[None, :] + shifts
    waves = np.sin(steps / PERIOD).astype("float64")
    folder = Path("time_sequence_prediction")
    folder.mkdir(exist_ok=True)
    with open(folder / "traindata.pt", "wb") as f:
        torch.save(waves, f)


if __name__ == "__main__":
    main()
