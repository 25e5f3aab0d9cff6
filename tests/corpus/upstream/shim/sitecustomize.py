"""Start-up hook of the corpus shim (tests/corpus/upstream/shim first on PYTHONPATH).

DISTRUN_SHIM_KEEP_TEMPDIR=PATH: `tempfile.TemporaryDirectory()` is PATH (created, never
removed), so a checkpoint an upstream script writes into a temporary folder (the
transformer tutorial's best model) outlives the run and can be compared.
"""

import os

_KEEP = os.environ.get("DISTRUN_SHIM_KEEP_TEMPDIR")
if _KEEP:
    import tempfile

    class _KeptDirectory:
        def __init__(self, *args, **kwargs) -> None:
            os.makedirs(_KEEP, exist_ok=True)
            self.name = _KEEP

        def __enter__(self) -> str:
            return self.name

        def __exit__(self, *exc) -> None:
            return None

        def cleanup(self) -> None:
            return None

    tempfile.TemporaryDirectory = _KeptDirectory  # type: ignore[misc,assignment]
