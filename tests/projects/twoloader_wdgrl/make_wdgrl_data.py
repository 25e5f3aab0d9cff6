"""Data for twoloader_wdgrl, run in the run folder (the repository root):

- trained_models/source.pt: the "source model" wdgrl.py starts from (MODEL_FILE), a
  state_dict of the repository's own `models.Net` built under torch.manual_seed(0): what
  train_source.py would write, untrained (the same file for both runs);
- data/BSR/BSDS500/data/images/train/bsds000.jpg: the one BSDS500 background MNISTM
  blends the digits with, a 29 x 29 x 3 uint8 numpy array under a .jpg name (the
  project's fake cv2.imread reads it). 29 x 29 so that `_random_patch` can only cut the
  patch at (0, 0) (`rng.randint(0, 1)`) and `_random_bsds_image` only pick image 0:
  every target image is the same whatever order the samples are fetched in, on any rank.
"""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, ".")
from models import Net  # noqa: E402  (the repository's own class)

torch.manual_seed(0)
Path("trained_models").mkdir(exist_ok=True)
torch.save(Net().state_dict(), "trained_models/source.pt")

folder = Path("data/BSR/BSDS500/data/images/train")
folder.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
with open(folder / "bsds000.jpg", "wb") as f:
    np.save(f, rng.integers(0, 256, (29, 29, 3)).astype(np.uint8))
