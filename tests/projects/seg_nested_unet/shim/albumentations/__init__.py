"""A stand-in for albumentations 0.4 (not installed), as pytorch-nested-unet's train.py
imports it: `from albumentations.augmentations import transforms` and
`from albumentations.core.composition import Compose, OneOf`. Called as
`Compose([...])(image=img, mask=mask)`, it returns the dict of both. Resize (nearest,
image and mask) and Normalize (the image only, albumentations' ImageNet defaults over
`max_pixel_value` 255) behave; the random transforms (RandomRotate90, Flip,
HueSaturationValue, RandomBrightness, RandomContrast, OneOf's choice) are deterministic
no-ops, as the shared torchvision shim's random transforms are: the same sample whatever
the order or the rank that fetches it."""

from albumentations.core.composition import Compose, OneOf  # noqa: F401
