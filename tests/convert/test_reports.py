"""What the conversion report says where a rewrite alone cannot make the script's
output right: progress counted against the whole dataset, the sampler's own shuffle
order, BatchNorm advice that names the right wrap (and none once --sync-bn did it)."""

from __future__ import annotations

import textwrap

import pytest

from distrun.convert import ConvertOptions, convert_source

SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4,
                    shuffle=True)
model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    print(f"[{i * len(x)}/{len(loader.dataset)}]")
"""


def findings(options: ConvertOptions) -> dict[str, str]:
    result = convert_source(textwrap.dedent(SCRIPT), "t.py", options)
    assert result.status == "converted"
    return {f"{f.line}:{f.rule}": f.message + " | " + f.fix for f in result.findings}


def test_progress_against_the_whole_dataset_is_reported() -> None:
    said = findings(ConvertOptions())
    assert "ends near 1/WORLD_SIZE" in said["14:data.progress"]
    assert "len(loader.sampler)" in said["14:data.progress"]


def test_the_samplers_own_order_is_said() -> None:
    result = convert_source(textwrap.dedent(SCRIPT), "t.py", ConvertOptions())
    [change] = [c for c in result.changes if "DistributedSampler" in c.message]
    assert "even on 1 process the batches differ" in change.message


@pytest.mark.parametrize(("target", "wrap"), [("ddp", "the DDP wrap"),
                                              ("accelerate", "`accelerator.prepare`")])
def test_batchnorm_advice_names_the_targets_wrap(target: str, wrap: str) -> None:
    said = findings(ConvertOptions(target=target))  # type: ignore[arg-type]
    assert f"SyncBatchNorm before {wrap}" in said["8:hazards.batchnorm"]
    assert "--sync-bn" in said["8:hazards.batchnorm"]


def test_no_batchnorm_advice_once_sync_bn_converts_it() -> None:
    assert not [k for k in findings(ConvertOptions(sync_bn=True)) if k.endswith("batchnorm")]
