"""Names only: randomaug.py imports PIL.ImageOps; the test runs with --noaug (never called)."""


def __getattr__(name):
    raise NotImplementedError(f"distrun shim: PIL.ImageOps.{name} is not faked")
