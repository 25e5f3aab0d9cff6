"""librosa, names only (not installed here): DB_wav_reader.py imports it for read_audio
(`librosa.load`), which the training never calls; calling `load` raises.

It also carries the one NumPy call of 2019 that DB_wav_reader.py makes at import, right
after `import librosa`: `np.set_printoptions(threshold=np.nan)`, NumPy < 1.14's way of
saying "never summarize", which NumPy 1.14 and later refuse with a ValueError. Here a NaN
threshold is taken as sys.maxsize, what NumPy's message says to write instead."""

import sys

import numpy as np

_set_printoptions = np.set_printoptions


def _set_printoptions_as_before_1_14(*args, **kwargs):
    threshold = kwargs.get("threshold")
    if isinstance(threshold, float) and threshold != threshold:
        kwargs["threshold"] = sys.maxsize
    return _set_printoptions(*args, **kwargs)


np.set_printoptions = _set_printoptions_as_before_1_14


def load(*args, **kwargs):
    raise NotImplementedError("librosa is a names-only shim here: read the pickled features")
