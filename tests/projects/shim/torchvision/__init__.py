"""A fake torchvision for the projects' shim (the real one cannot be installed here).

Datasets (`torchvision.datasets`) are synthetic and deterministic: each draws its
samples from its OWN `torch.Generator` (seeded by the dataset's name and split), never
from the global random generator, and ignores `root` and `download` (nothing is read or
written). Sizes: `DISTRUN_SHIM_TRAIN_SIZE` (default 64) samples for a training split and
`DISTRUN_SHIM_TEST_SIZE` (default 40) for a test split; `FakeData` takes
`DISTRUN_SHIM_TRAIN_SIZE` when set, else its `size` argument.

`torchvision.transforms`: ToTensor, Normalize, Compose, Resize, CenterCrop, Lambda,
Grayscale and Pad behave; every random transform (RandomCrop, RandomHorizontalFlip,
RandomRotation, ColorJitter, RandomResizedCrop...) is a deterministic no-op.
`torchvision.utils`: `save_image` writes a small file, `make_grid` returns a 3-D tensor.
"""

from . import datasets, transforms, utils  # noqa: F401

__version__ = "0.0.0+distrun.shim"
