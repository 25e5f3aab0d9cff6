"""albumentations.core (see albumentations/__init__.py)."""
