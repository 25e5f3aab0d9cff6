"""Names only: utils/transforms.py imports PIL.ImageFilter; its transforms are not built."""


def __getattr__(name):
    raise NotImplementedError(f"distrun shim: PIL.ImageFilter.{name} is not faked")
