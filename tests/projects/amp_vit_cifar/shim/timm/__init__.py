"""Names only: models/dyt.py imports `timm.models.layers.LayerNorm2d` at module level and
train_cifar10.py imports models.dyt whatever --net says (timm is not installed here)."""
