"""A minimal `six` for the projects' shim: `six.moves.urllib` (Python 3's urllib) and
`six.BytesIO` / `six.StringIO` (io's; clovaai's dataset.py reads LMDB images through
`six.BytesIO()`).

The corpus never downloads: the harness creates the data folders first, so the
download branches that use it do not run.
"""

from io import BytesIO, StringIO  # noqa: F401

from . import moves  # noqa: F401

PY3 = True
