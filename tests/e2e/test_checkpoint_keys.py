"""A DataParallel script's checkpoints keep their format through the conversion (issue
25, class 13): the converted run on 2 processes writes the `module.` keys the original
wrote, so the original script's own resume loads it, and the converted script resumes
from a checkpoint of the original."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, distrun, run_cmd

pytestmark = pytest.mark.e2e
SCRIPT = ROOT / "tests" / "convert" / "fixtures" / "model" / "dataparallel_keys.py"


def test_the_original_resumes_from_the_converted_runs_checkpoint_and_back(tmp_path: Path) -> None:
    shutil.copy(SCRIPT, tmp_path / "train.py")
    converted = distrun("convert", "train.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    launched = distrun("launch", "--nproc-per-node", "2", "train_ddp.py", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    keys = sorted(torch.load(tmp_path / "last.pt"))
    assert keys and all(k.startswith("module.") for k in keys), keys
    resumed = run_cmd([sys.executable, "train.py"], cwd=tmp_path)  # the original's resume
    assert resumed.returncode == 0, resumed.stderr
    again = distrun("launch", "--nproc-per-node", "2", "train_ddp.py", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(torch.load(tmp_path / "last.pt")) == keys
