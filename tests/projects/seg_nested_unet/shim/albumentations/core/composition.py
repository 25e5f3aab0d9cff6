"""Compose and OneOf of albumentations 0.4 (see albumentations/__init__.py)."""

from __future__ import annotations


class Compose:
    def __init__(self, transforms, p: float = 1.0, **kwargs):
        self.transforms = list(transforms)
        self.p = p

    def __call__(self, force_apply: bool = False, **data):
        for t in self.transforms:
            data = t(**data)
        return data


class OneOf(Compose):
    """Would apply one of its transforms, picked at random: here each is a no-op, and
    so is the pick."""

    def __call__(self, force_apply: bool = False, **data):
        return data
