"""`six.moves` of the projects' shim: Python 3 names."""

import urllib  # noqa: F401
import urllib.request  # noqa: F401
