"""Fake `PIL.ImageFile`: the flag scripts set at import (nothing is decoded here)."""

LOAD_TRUNCATED_IMAGES = False
