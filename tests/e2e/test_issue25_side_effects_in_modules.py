"""Issue 25, class 6: side effects in the modules a conversion must follow, end to end.

A notebook whose models are handed, in a list of (model, label), to a helper module
beside it that trains each, saves each with `torch.save(model.state_dict(), ...)`,
prints and writes progress with `sys.stdout.write`; and a package run from inside itself
(`from pkg.utils import load_data, save_model` with the entry in pkg/, the package's
parent folder on PYTHONPATH). The original on 1 process (batch 32: one batch per epoch)
against the conversion on 2 processes (16 per rank) under `launch --check`, with the
projects' shim and DISTRUN_SHIM_SEED_BY_RANK=1 (every rank draws its own random numbers,
rank 0 the original's). The weights must match to 1e-5, each save and each line be
written once. Before class 6 the notebook converted alone: no model found (exit 4); the
package's helper was not converted: each rank saved and printed, the loader unsharded.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, distrun, run_cmd
from tests.projects.notebook import notebook_cells

pytestmark = pytest.mark.e2e

CELLS = [
    "import os\n\nimport torch\nimport torch.nn as nn\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "from torch.utils.data.sampler import SubsetRandomSampler\n",
    "%matplotlib inline\ngen = torch.Generator().manual_seed(1)\n"
    "data = TensorDataset(torch.randn(40, 4, generator=gen), torch.randn(40, 1, generator=gen))\n"
    "loader = DataLoader(data, batch_size=int(os.environ['BATCH_SIZE']),\n"
    "                    sampler=SubsetRandomSampler(list(range(32))))\n",
    "import helpers\n\nmodel_a = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
    "model_b = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
    "helpers.compare([(model_a, 'a'), (model_b, 'b')], loader)\n",
    "# built after the first training: its random weights follow the sampler's draws\n"
    "model_c = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
    "helpers.compare([(model_c, 'c')], loader)\n",
]

HELPERS = textwrap.dedent('''\
    import os
    import sys

    import torch
    import torch.nn as nn


    def _fit(model, loader):
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        losses = []
        for epoch in range(3):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            sys.stdout.write(f"progress epoch {epoch}\\n")
        return losses


    def compare(model_list, loader):
        for i, (model, label) in enumerate(model_list):
            losses = _fit(model, loader)
            torch.save(model.state_dict(), f"{os.environ['OUT_PATH']}_{label}.pt")
            print(f"saved {label}: {losses[-1]:.4f}")
    ''')

UTILS = textwrap.dedent('''\
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    def load_data(batch_size):
        gen = torch.Generator().manual_seed(1)
        data = TensorDataset(torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen))
        print(f"loaded {len(data)} samples")
        return DataLoader(data, batch_size=batch_size, shuffle=True)


    def save_model(model, path):
        torch.save(model.state_dict(), path)
        print(f"saved {path}")
    ''')

TRAIN = textwrap.dedent('''\
    import os

    import torch
    import torch.nn as nn

    from pkg.utils import load_data, save_model

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = load_data(int(os.environ["BATCH_SIZE"]))
    for epoch in range(4):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    save_model(model, os.environ["OUT_PATH"])
    ''')


def _shim() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "projects" / "shim"),
                                           os.environ.get("PYTHONPATH", "")]),
            "DISTRUN_SHIM_SEED_BY_RANK": "1"}


def _same(expected_path: Path, got_path: Path) -> None:
    expected, got = torch.load(expected_path), torch.load(got_path)
    assert sorted(expected) == sorted(got)
    for key, value in expected.items():
        assert torch.allclose(value, got[key], atol=1e-5), (got_path.name, key)


def test_a_notebook_training_a_list_of_models_in_its_helper_trains_like_the_original(
        tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {},
                           "outputs": [], "source": c.splitlines(keepends=True)}
                          for c in CELLS], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (proj / "nb.ipynb").write_text(json.dumps(notebook))
    (proj / "helpers.py").write_text(HELPERS)
    (proj / "nb_cells.py").write_text(notebook_cells((proj / "nb.ipynb").read_bytes()))
    single = run_cmd([sys.executable, "nb_cells.py"], cwd=proj,
                     env={**_shim(), "BATCH_SIZE": "32", "OUT_PATH": str(tmp_path / "single")})
    assert single.returncode == 0, single.stderr
    (proj / "nb_cells.py").unlink()

    converted = distrun("convert", "nb.ipynb", cwd=proj)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    copy = tmp_path / "proj_ddp"
    assert sorted(p.name for p in copy.iterdir()) == ["helpers.py", "nb.ipynb", "nb_ddp.py"]
    assert (copy / "nb.ipynb").read_bytes() == (proj / "nb.ipynb").read_bytes()
    assert (proj / "helpers.py").read_text() == HELPERS  # the user's files left alone
    for rule in ("helpers.py:24: model.wrap", "helpers.py:25: checkpoint.rank0_save",
                 "helpers.py:26: output.rank0", "helpers.py:18: output.rank0",
                 "nb.ipynb:cell 2:4: data.share_sampler"):
        assert rule in converted.stdout, rule

    two = distrun("launch", "--nproc-per-node", "2", "--check", "nb_ddp.py", cwd=copy,
                  env={**_shim(), "BATCH_SIZE": "16", "OUT_PATH": str(tmp_path / "two")})
    assert two.returncode == 0, two.stdout + two.stderr
    for label in "abc":
        _same(tmp_path / f"single_{label}.pt", tmp_path / f"two_{label}.pt")
        assert two.stdout.count(f"saved {label}:") == 1, two.stdout
    assert two.stdout.count("progress epoch 0") == 3, two.stdout  # once per model


def test_a_package_run_from_inside_itself_converts_its_helper(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "utils.py").write_text(UTILS)
    (repo / "pkg" / "train.py").write_text(TRAIN)
    single = run_cmd([sys.executable, "train.py"], cwd=repo / "pkg",
                     env={**_shim(), "PYTHONPATH": f"{repo}{os.pathsep}{_shim()['PYTHONPATH']}",
                          "BATCH_SIZE": "32", "OUT_PATH": str(tmp_path / "single.pt")})
    assert single.returncode == 0, single.stderr

    converted = distrun("convert", "pkg/train.py", cwd=repo)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "pkg/train.py:6: info: `pkg.utils`: the entry's own package" in converted.stdout
    copy = tmp_path / "repo_ddp"
    assert "if RANK == 0:" in (copy / "pkg" / "utils.py").read_text()
    assert (repo / "pkg" / "utils.py").read_text() == UTILS

    two = distrun("launch", "--nproc-per-node", "2", "--check", "train.py", cwd=copy / "pkg",
                  env={**_shim(), "PYTHONPATH": f"{copy}{os.pathsep}{_shim()['PYTHONPATH']}",
                       "BATCH_SIZE": "16", "OUT_PATH": str(tmp_path / "two.pt")})
    assert two.returncode == 0, two.stdout + two.stderr
    _same(tmp_path / "single.pt", tmp_path / "two.pt")
    assert two.stdout.count("loaded 32 samples") == 1, two.stdout
    assert two.stdout.count("saved ") == 1, two.stdout


FAKEDATA = textwrap.dedent('''\
    """A dataset of a library that downloads its file when asked and it is missing."""
    import os
    import time

    import torch


    class Numbers(torch.utils.data.Dataset):
        def __init__(self, root, download=False):
            path = os.path.join(root, "numbers.pt")
            if download and not os.path.exists(path):
                os.makedirs(root, exist_ok=True)
                with open(os.path.join(root, "downloads.log"), "a") as log:
                    log.write(os.environ.get("RANK", "0") + "\\n")
                time.sleep(1)  # the transfer
                generator = torch.Generator().manual_seed(0)
                torch.save((torch.randn(32, 4, generator=generator),
                            torch.randn(32, 1, generator=generator)), path)
            self.x, self.y = torch.load(path)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i], self.y[i]
    ''')


def test_a_dataset_downloaded_inside_a_dataloader_call_is_downloaded_once(
        tmp_path: Path) -> None:
    """PyTorch-GAN's `DataLoader(datasets.MNIST(..., download=True), ...)`: the dataset is
    moved out of the call to be named for its sampler. Moved below the barrier that makes
    the other ranks wait for rank 0's download, every rank downloaded at once (seen in
    the seventh round's cgan, read in its converted file); above it, once."""
    library = tmp_path / "library"
    library.mkdir()
    (library / "fakedata.py").write_text(FAKEDATA)
    one, two = tmp_path / "one", tmp_path / "two"
    fixture = ROOT / "tests/convert/fixtures/download/inside_loader.py"
    for folder in (one, two):
        folder.mkdir()
        (folder / "train.py").write_text(fixture.read_text())
    env = {"PYTHONPATH": str(library)}
    single = run_cmd([sys.executable, "train.py"], cwd=one,
                     env={**env, "BATCH_SIZE": "32", "OUT_PATH": str(tmp_path / "single.pt")})
    assert single.returncode == 0, single.stderr
    converted = distrun("convert", "train.py", cwd=two)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "download.rank0_first" in converted.stdout
    launched = distrun("launch", "--nproc-per-node", "2", "--check", "train_ddp.py", cwd=two,
                       env={**env, "BATCH_SIZE": "16", "OUT_PATH": str(tmp_path / "two.pt")})
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert (two / "data" / "downloads.log").read_text().split() == ["0"]
    _same(tmp_path / "single.pt", tmp_path / "two.pt")
