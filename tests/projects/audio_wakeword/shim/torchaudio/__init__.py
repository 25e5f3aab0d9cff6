"""A stand-in for the few torchaudio 0.5 calls of LearnedVector's wakeword dataset.py
(torchaudio is not installed here): `load` (wav files through the standard library's
`wave`), and `transforms` (Resample, FrequencyMasking, TimeMasking)."""

import wave

import numpy as np
import torch

from . import transforms  # noqa: F401

__all__ = ["load", "transforms"]


def load(filepath, normalization=True, **kwargs):
    """(waveform [channels, frames] float32, sample_rate). torchaudio 0.5 read through
    sox's signed 32-bit samples: `normalization=False` gives those raw values (a 16-bit
    sample times 65536), True divides them by 1 << 31 (into [-1, 1]), a number divides
    by that number."""
    with wave.open(str(filepath), "rb") as w:
        rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width != 2:
        raise ValueError(f"{filepath}: only 16-bit wav files are read by this shim")
    samples = np.frombuffer(raw, dtype="<i2").reshape(-1, channels).T.astype(np.float64)
    samples *= 65536.0
    if normalization is True:
        samples /= float(1 << 31)
    elif normalization not in (False, None) and not callable(normalization):
        samples /= float(normalization)
    waveform = torch.from_numpy(samples.astype(np.float32))
    if callable(normalization):
        waveform = normalization(waveform)
    return waveform, rate
