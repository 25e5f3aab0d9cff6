"""Shared files changed by one rank (issue 25, fifth round: pyGAT's checkpoint cleanup):
a script that saves a checkpoint each epoch through a temporary name, moves it into
place and removes the older ones, converted and run on 2 processes, trains like the
original and leaves the same files. Every rank moving the file, as the original's line
does, fails on all but the first (FileNotFoundError); every rank writing the history
with `np.savetxt` is found by launch --check (`[shared-write]`, exit 3)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import distrun, run_cmd

pytestmark = pytest.mark.e2e

SCRIPT = textwrap.dedent('''\
    import glob
    import os
    import shutil

    import numpy as np
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    history = []
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=int(os.environ["BATCH_SIZE"]))
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(4):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        history.append(loss.item())
        np.savetxt("history.txt", np.array(history))
        torch.save(model.state_dict(), f"{epoch}.pkl.tmp")
        os.replace(f"{epoch}.pkl.tmp", f"{epoch}.pkl")
        for file in glob.glob("*.pkl"):
            if int(file.split(".")[0]) < epoch:
                os.remove(file)
    shutil.copyfile("3.pkl", os.environ["OUT_PATH"])
    ''')


def test_a_checkpoint_moved_into_place_and_cleaned_up_by_rank_0(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
    single = run_cmd([sys.executable, "train.py"], cwd=one,
                     env={"BATCH_SIZE": "32", "OUT_PATH": "final.pt"})
    assert single.returncode == 0, single.stderr
    converted = distrun("convert", "train.py", cwd=two)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert converted.stdout.count("file_ops.rank0:") == 3, converted.stdout
    assert converted.stdout.count("file_ops.rank0_write:") == 1, converted.stdout
    launched = distrun("launch", "--nproc-per-node", "2", "--check", "train_ddp.py", cwd=two,
                       env={"BATCH_SIZE": "16", "OUT_PATH": "final.pt"})
    assert launched.returncode == 0, launched.stdout + launched.stderr
    kinds = (".pkl", ".tmp", ".pt", ".txt")
    left = sorted(p.name for p in two.iterdir() if p.suffix in kinds)
    assert left == sorted(p.name for p in one.iterdir() if p.suffix in kinds)
    assert left == ["3.pkl", "final.pt", "history.txt"]
    assert len((two / "history.txt").read_text().split()) == 4
    expected, got = torch.load(one / "final.pt"), torch.load(two / "final.pt")
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, atol=1e-5, rtol=1e-5, msg=key)
