"""`torchvision.models.detection.backbone_utils`: imported by RetinaFace's
models/retinaface.py, never used."""
