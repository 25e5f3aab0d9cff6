"""Fake `PIL.ImageOps`: the module exists so that `from PIL import ImageOps` imports
(ssl_consistency's augmentation pool imports it at the top); none of its functions is
given: a run that calls one fails with AttributeError (the fake images have no filters)."""
