"""albumentations.augmentations (see albumentations/__init__.py)."""
