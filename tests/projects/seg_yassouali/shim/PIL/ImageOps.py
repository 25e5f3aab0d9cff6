"""Names only: utils/transforms.py imports PIL.ImageOps; its transforms are not built."""


def __getattr__(name):
    raise NotImplementedError(f"distrun shim: PIL.ImageOps.{name} is not faked")
