"""`distrun doctor`'s FSDP2 check, against this torch and against a torch without it."""

from __future__ import annotations

import os
from pathlib import Path

from distrun.doctor import Context
from distrun.doctor.fsdp import check_fsdp2


def test_this_torch_has_fsdp2() -> None:
    [result] = check_fsdp2(Context())
    assert result.status == "ok" and "fully_shard" in result.detail


def test_a_torch_without_fully_shard_is_named_with_the_fix(tmp_path: Path) -> None:
    fake = tmp_path / "torch"  # an old torch, first on the path: no torch.distributed.fsdp
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '1.13.0'\n")
    [result] = check_fsdp2(Context(environ={**os.environ, "PYTHONPATH": str(tmp_path)}))
    assert result.status == "warn" and "torch 2.6 or newer" in result.hint
