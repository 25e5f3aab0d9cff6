"""Fingerprints of tensors and batches, for comparing ranks without sending tensors: equal
bytes give equal fingerprints; different bytes, different ones (but for a 2**-64 chance).
Computed where a tensor lives (a GPU tensor is not copied to the host)."""

from __future__ import annotations

import torch

CHUNK = 1 << 22  # words of a tensor fingerprinted at a time


def fingerprint(tensor: torch.Tensor, sample: int | None = None) -> str:
    """Equal for equal bytes, different (but for a 2**-64 chance) otherwise: two position-
    weighted sums of the tensor's words (4 bytes each where its size allows), computed
    where the tensor lives (no copy to the host). With `sample`, of at most that many
    elements, evenly strided (the default check's window: a parameter whose gradients were
    not averaged differs nearly everywhere, and the window must cost next to nothing)."""
    flat = tensor.detach().reshape(-1)
    if flat.numel() == 0:
        return f"{flat.dtype}:0"
    if sample is not None and flat.numel() > sample:
        flat = flat[::flat.numel() // sample][:sample]
    try:
        data = _words(flat.contiguous())
    except RuntimeError:  # a tensor whose bytes cannot be viewed (quantized, sparse...)
        return f"{flat.dtype}:{tuple(tensor.shape)}:?"
    total = torch.zeros(2, dtype=torch.int64, device=data.device)
    for start in range(0, data.numel(), CHUNK):
        part = data[start:start + CHUNK].to(torch.int64)
        index = torch.arange(start, start + part.numel(), device=data.device) * 2 + 1
        part *= index
        total[0] += part.sum()
        total[1] += (part * index).sum()
    first, second = total.tolist()
    return f"{flat.dtype}:{tuple(tensor.shape)}:{first:x}:{second:x}"


def _words(flat: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as the widest integers that divide its size."""
    data = flat.view(torch.uint8)
    for dtype in (torch.int32, torch.int16):
        if data.numel() % dtype.itemsize == 0:
            try:
                return data.view(dtype)
            except RuntimeError:  # an offset not aligned to the word
                continue
    return data


def batch_fingerprint(batch: object) -> tuple[str, int | None]:
    """A batch's fingerprint (tensors, numbers, strings, in lists, tuples, dicts) and its
    size (the first tensor's first dimension)."""
    parts: list[str] = []
    size: list[int] = []

    def walk(obj: object) -> None:
        if isinstance(obj, torch.Tensor):
            parts.append(fingerprint(obj))
            if obj.dim() and not size:
                size.append(int(obj.shape[0]))
        elif isinstance(obj, dict):
            for key in sorted(obj, key=str):
                parts.append(str(key))
                walk(obj[key])
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item)
        elif isinstance(obj, (str, int, float, bool)) or obj is None:
            parts.append(repr(obj))
        else:
            parts.append(type(obj).__name__)

    walk(batch)
    return "|".join(parts), (size[0] if size else None)
