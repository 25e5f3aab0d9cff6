"""`torchvision.models.detection`: importable only (no detection model here)."""

from torchvision.models.detection import backbone_utils  # noqa: F401
