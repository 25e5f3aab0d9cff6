"""Fake `torchvision.datasets` (see torchvision/__init__.py)."""

from __future__ import annotations

import os
import zlib

import torch
from PIL import Image
from torch.utils.data import Dataset


def _size(train: bool) -> int:
    if train:
        return int(os.environ.get("DISTRUN_SHIM_TRAIN_SIZE", "64"))
    return int(os.environ.get("DISTRUN_SHIM_TEST_SIZE", "40"))


def _generator(*parts: object) -> torch.Generator:
    seed = zlib.crc32("/".join(map(str, parts)).encode())
    return torch.Generator().manual_seed(seed)


class _SyntheticImages(Dataset):
    """n images of shape (H, W) or (H, W, C), uint8, with integer labels."""

    # not `shape`: torchvision's datasets have none, and sklearn's KFold.split(dataset)
    # reads `X.shape[0]` as the number of samples where there is one
    _image_shape: tuple[int, ...] = (28, 28)
    num_classes = 10

    def __init__(self, root=None, train: bool = True, transform=None, target_transform=None,
                 download: bool = False, **kwargs):
        self.root = root
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        n = _size(train)
        g = _generator(type(self).__name__, "train" if train else "test")
        self.targets = torch.randint(0, self.num_classes, (n,), generator=g)
        noise = torch.randint(0, 96, (n, *self._image_shape), generator=g)
        # an image that says something about its label, so that training learns
        level = (self.targets.float() * (160 / max(self.num_classes - 1, 1))).long()
        level = level.view(n, *([1] * len(self._image_shape)))
        self.data = (noise + level).clamp(0, 255).to(torch.uint8)
        self.classes = [str(i) for i in range(self.num_classes)]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index):
        img = Image.fromarray(self.data[index].numpy())
        target = int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class MNIST(_SyntheticImages):
    _image_shape = (28, 28)

    # torchvision's deprecated aliases (old tutorials read `test_data.test_data`)
    @property
    def train_data(self):
        return self.data

    @property
    def test_data(self):
        return self.data

    @train_data.setter
    def train_data(self, value):
        # old torchvision (< 0.2.2) kept them as plain attributes that scripts reassigned
        # (example_forgetting's run_mnist.py keeps a subset: `trainset.train_data = ...`)
        self.data = value

    @property
    def train_labels(self):
        return self.targets

    @train_labels.setter
    def train_labels(self, value):
        self.targets = value

    @property
    def test_labels(self):
        return self.targets


class FashionMNIST(MNIST):
    pass


class KMNIST(MNIST):
    pass


class EMNIST(MNIST):
    def __init__(self, root=None, split="balanced", **kwargs):
        super().__init__(root, **kwargs)


class CIFAR10(_SyntheticImages):
    _image_shape = (32, 32, 3)


class CIFAR100(CIFAR10):
    num_classes = 100


class SVHN(CIFAR10):
    def __init__(self, root=None, split="train", **kwargs):
        super().__init__(root, train=split == "train", **kwargs)


class STL10(CIFAR10):
    """Imported, not trained on, in the corpus (ssl_consistency's dataset utilities)."""

    def __init__(self, root=None, split="train", **kwargs):
        super().__init__(root, train=split != "test", **kwargs)


class FakeData(Dataset):
    def __init__(self, size: int = 1000, image_size=(3, 224, 224), num_classes: int = 10,
                 transform=None, target_transform=None, random_offset: int = 0):
        self.size = int(os.environ.get("DISTRUN_SHIM_TRAIN_SIZE", size))
        self.image_size = tuple(image_size)
        self.num_classes = num_classes
        self.transform = transform
        self.target_transform = target_transform
        self.random_offset = random_offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        g = _generator("FakeData", index + self.random_offset)
        c, h, w = self.image_size
        array = torch.randint(0, 256, (h, w, c), generator=g, dtype=torch.uint8).numpy()
        img = Image.fromarray(array[..., 0] if c == 1 else array)
        target = int(torch.randint(0, self.num_classes, (1,), generator=g))
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class ImageFolder(Dataset):
    """Fake ImageFolder: one class per sub-folder, files read with the fake PIL."""

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None, **kwargs):
        self.root = root
        self.transform = transform
        self.target_transform = target_transform
        self.classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = [(os.path.join(root, c, f), self.class_to_idx[c])
                        for c in self.classes for f in sorted(os.listdir(os.path.join(root, c)))]
        self.targets = [t for _, t in self.samples]
        self.imgs = self.samples
        self.loader = loader or Image.open

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index):
        path, target = self.samples[index]
        img = self.loader(path)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


__all__ = ["MNIST", "FashionMNIST", "KMNIST", "EMNIST", "CIFAR10", "CIFAR100", "SVHN", "STL10",
           "FakeData", "ImageFolder"]
