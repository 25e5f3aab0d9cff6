"""Names only: randomaug.py imports PIL.ImageEnhance; the test runs with --noaug (never called)."""


def __getattr__(name):
    raise NotImplementedError(f"distrun shim: PIL.ImageEnhance.{name} is not faked")
