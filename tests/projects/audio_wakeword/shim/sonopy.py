"""A stand-in for sonopy 0.1 (not installed here), the MFCC functions the wakeword
dataset.py imports: `power_spec`, `mel_spec`, `mfcc_spec`, `filterbanks`, computed with
NumPy/SciPy the usual way (frames of `window_stride[0]` samples every
`window_stride[1]`, the power spectrum of an `fft_size` FFT, triangular mel filters, the
log, a DCT-II). Shapes as sonopy's: (frames, num_coeffs)."""

import numpy as np
from scipy.fft import dct


def _frames(audio, window_stride):
    window, stride = window_stride
    audio = np.asarray(audio, dtype=np.float64)
    if len(audio) < window:
        audio = np.pad(audio, (0, window - len(audio)))
    count = 1 + (len(audio) - window) // stride
    index = np.arange(window)[None, :] + stride * np.arange(count)[:, None]
    return audio[index]


def power_spec(audio, window_stride=(160, 80), fft_size=512):
    frames = _frames(audio, window_stride)
    return np.abs(np.fft.rfft(frames, n=fft_size)) ** 2 / fft_size


def _mel(hz):
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def _hz(mel):
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def filterbanks(sample_rate, num_filt, fft_len):
    points = _hz(np.linspace(_mel(0.0), _mel(sample_rate / 2.0), num_filt + 2))
    bins = np.floor((fft_len + 1) * points / sample_rate).astype(int)
    banks = np.zeros((num_filt, fft_len // 2 + 1))
    for i in range(num_filt):
        left, mid, right = bins[i], bins[i + 1], bins[i + 2]
        for j in range(left, mid):
            banks[i, j] = (j - left) / max(mid - left, 1)
        for j in range(mid, right):
            banks[i, j] = (right - j) / max(right - mid, 1)
    return banks


def mel_spec(audio, sample_rate, window_stride=(160, 80), fft_size=512, num_filt=20):
    powers = power_spec(audio, window_stride, fft_size)
    return powers @ filterbanks(sample_rate, num_filt, fft_size).T


def mfcc_spec(audio, sample_rate, window_stride=(160, 80), fft_size=512, num_filt=20,
              num_coeffs=13, return_parts=False):
    mels = mel_spec(audio, sample_rate, window_stride, fft_size, num_filt)
    mfccs = dct(np.log(mels + 1e-10), type=2, axis=1, norm="ortho")[:, :num_coeffs]
    if return_parts:
        return power_spec(audio, window_stride, fft_size), mels, mfccs
    return mfccs
