"""The standard library's `urllib` with one change, for pytorch_train.py's
download_data(): `urllib.request.urlretrieve` of its fowl_data.zip writes a small fake
zip (the run is offline) instead of downloading it; every other URL goes to the real
function. Every module but `urllib.request` is the standard library's own: this
package's `__path__` continues in the standard library's `urllib` folder."""

import os as _os

__path__.append(_os.path.join(_os.path.dirname(_os.__file__), "urllib"))
