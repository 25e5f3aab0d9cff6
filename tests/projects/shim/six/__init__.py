"""A minimal `six` for the projects' shim: only `six.moves.urllib` (Python 3's urllib).

The corpus never downloads: the harness creates the data folders first, so the
download branches that use it do not run.
"""

from . import moves  # noqa: F401

PY3 = True
