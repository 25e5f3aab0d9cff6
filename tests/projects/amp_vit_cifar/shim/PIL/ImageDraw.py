"""Names only: randomaug.py imports PIL.ImageDraw; the test runs with --noaug (never called)."""


def __getattr__(name):
    raise NotImplementedError(f"distrun shim: PIL.ImageDraw.{name} is not faked")
