"""Fingerprints: equal for equal bytes, different for any one changed bit, whatever the
dtype, shape, layout or size (several chunks)."""

from __future__ import annotations

import pytest
import torch

from distrun.check import fingerprint as fp


@pytest.mark.parametrize("tensor", [
    torch.randn(3, 5), torch.randn(3, 5).half(), torch.randn(7).to(torch.bfloat16),
    torch.arange(9, dtype=torch.int8), torch.tensor([True, False, True]),
    torch.randn(10, 10)[:, :3],  # not contiguous
    torch.randn(101)[1:],  # an offset into its storage
])
def test_one_flipped_bit_changes_it_and_a_copy_does_not(tensor: torch.Tensor) -> None:
    assert fp.fingerprint(tensor) == fp.fingerprint(tensor.clone())
    changed = tensor.clone().contiguous()
    raw = changed.view(-1).view(torch.uint8)
    for byte in (0, raw.numel() // 2, raw.numel() - 1):
        flipped = changed.clone()
        view = flipped.view(-1).view(torch.uint8)
        if tensor.dtype == torch.bool:  # a bool's byte must stay 0 or 1
            view[byte] = 1 - view[byte]
        else:
            view[byte] ^= 1
        assert fp.fingerprint(flipped) != fp.fingerprint(tensor), (tensor.dtype, byte)


def test_a_tensor_larger_than_a_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp, "CHUNK", 1000)
    tensor = torch.randn(4500)
    moved = tensor.clone()
    moved[0], moved[4499] = tensor[4499], tensor[0]  # the same bytes in other places
    assert fp.fingerprint(tensor) == fp.fingerprint(tensor.clone())
    assert fp.fingerprint(moved) != fp.fingerprint(tensor)


def test_batches_of_nested_structures() -> None:
    x = torch.randn(4, 3)
    digest, size = fp.batch_fingerprint({"x": x, "meta": ["a", 1, None]})
    assert size == 4
    assert digest == fp.batch_fingerprint({"meta": ["a", 1, None], "x": x.clone()})[0]
    assert digest != fp.batch_fingerprint({"x": x + 1, "meta": ["a", 1, None]})[0]


def test_a_data_set_of_python_strings_has_the_same_content_digest_in_every_process() -> None:
    """bert_sentiment's Dataset keeps its reviews as a numpy array of Python strings
    (dtype object): their bytes are pointers, other in every process, so launch --check
    said [split-differs] of equal data. Two arrays of equal strings made apart (other
    objects, other addresses) must give one digest; other strings another."""
    import numpy as np

    from distrun.check.probe_loaders import _content

    class Reviews:
        def __init__(self, texts: list[str]) -> None:
            self.review = np.array(texts, dtype=object)
            self.target = np.arange(len(texts))

    first = Reviews([f"review {i} " * 3 for i in range(40)])
    again = Reviews([f"review {i} " * 3 for i in range(40)])
    other = Reviews([f"review {i + 1} " * 3 for i in range(40)])
    assert first.review[0] is not again.review[0]  # other objects, other addresses
    assert _content(first) == _content(again) != _content(other)
