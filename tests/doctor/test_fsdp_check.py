"""`distrun doctor`'s FSDP2 check, against this torch and against a torch without it."""

from __future__ import annotations

import sys
import types

import pytest

from distrun.doctor import Context
from distrun.doctor.fsdp import check_fsdp2


def test_this_torch_has_fsdp2() -> None:
    [result] = check_fsdp2(Context())
    assert result.status == "ok" and "fully_shard" in result.detail


def test_a_torch_without_fully_shard_is_named_with_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an old torch (none installs here): its torch.distributed.fsdp has no fully_shard
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp",
                        types.ModuleType("torch.distributed.fsdp"))
    [result] = check_fsdp2(Context())
    assert result.status == "warn" and "torch 2.6 or newer" in result.hint
    assert "fully_shard" in result.detail
