"""torchaudio.transforms as the wakeword dataset uses them: Resample (linear
interpolation), and SpecAugment's FrequencyMasking / TimeMasking, which here are
deterministic no-ops (as the shared torchvision shim's random transforms are): the
masks torchaudio draws are not drawn; dataset.py's own `torch.rand` draws (which
policy, whether to mask) still happen."""

import torch
from torch import nn


class Resample(nn.Module):
    def __init__(self, orig_freq=16000, new_freq=16000, **kwargs):
        super().__init__()
        self.orig_freq, self.new_freq = orig_freq, new_freq

    def forward(self, waveform):
        if self.orig_freq == self.new_freq:
            return waveform
        frames = int(round(waveform.shape[-1] * self.new_freq / self.orig_freq))
        return torch.nn.functional.interpolate(
            waveform.unsqueeze(0), size=frames, mode="linear", align_corners=False
        ).squeeze(0)


class _Masking(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, specgram, mask_value=0.0):
        return specgram


class FrequencyMasking(_Masking):
    pass


class TimeMasking(_Masking):
    pass
