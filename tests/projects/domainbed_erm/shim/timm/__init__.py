"""Fake `timm`: DomainBed's networks.py imports it at module level for its ViT
featurizers; the corpus trains the MNIST CNN, so nothing of it is called."""


def create_model(*args, **kwargs):
    raise RuntimeError("the distrun corpus shim has no timm models")


def list_models(*args, **kwargs):
    return []
