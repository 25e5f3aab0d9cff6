"""Issue 25, class 10, end to end: the user's DeepSpeed config is the base of the one
`convert --to deepspeed` writes, and the config the script's own argument names is the
one the converted script runs with.

The script names `team_ds.json` as its `--deepspeed_config` default; that file sets ZeRO
stage 1, a `csv_monitor` (distrun never writes one: the learning rate DeepSpeed logs at
every step, in monitor/team/, shows that this config is the one read) and an `optimizer`
section DeepSpeed does not use (the script's own AdamW is given to deepspeed.initialize:
were the config's Adam at lr 0.5 used, the weights and the logged rate would differ).
Converted with `--force` (the merged config replaces the user's, kept as .orig),
launched on 2 CPU processes: the same weights as the original on one, to 1e-5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import distrun
from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.e2e

SCRIPT = """\
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--deepspeed_config", default="team_ds.json", help="DeepSpeed config")
args = parser.parse_args()


def main():
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=int(os.environ.get("BATCH_SIZE", 64)),
                        shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for epoch in range(3):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
    torch.save(model.state_dict(), os.environ.get("OUT_PATH", "model.pt"))


if __name__ == "__main__":
    main()
"""
TEAM = {"zero_optimization": {"stage": 1},
        "csv_monitor": {"enabled": True, "output_path": "monitor", "job_name": "team"},
        "optimizer": {"type": "Adam", "params": {"lr": 0.5}}, "wall_clock_breakdown": False}


def test_the_users_named_config_is_merged_and_is_the_one_the_run_reads(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "team_ds.json").write_text(json.dumps(TEAM, indent=2) + "\n")
    converted = tmp_path / "train_deepspeed.py"
    refused = distrun("convert", str(script), "--to", "deepspeed", cwd=tmp_path)
    assert refused.returncode == 2 and "team_ds.json is the user's DeepSpeed config" \
        in refused.stderr, refused.stderr
    assert not converted.exists()
    result = distrun("convert", str(script), "--to", "deepspeed", "--force", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ZeRO stage 1 (--zero not given)" in result.stdout
    assert "`train_micro_batch_size_per_gpu` 64 added" in result.stdout
    assert "team_ds.json's optimizer (Adam) is not used" in result.stdout
    merged = json.loads((tmp_path / "team_ds.json").read_text())
    assert {k: merged[k] for k in TEAM} == TEAM  # every value of the user's kept
    assert merged["gradient_clipping"] == 0.0 and "ds_config.json" not in {
        p.name for p in tmp_path.iterdir()}
    assert json.loads((tmp_path / "team_ds.json.orig").read_text()) == TEAM
    assert 'os.environ["DS_CONFIG"] = args.deepspeed_config' in converted.read_text()
    run_single(script, tmp_path)
    run_two(converted, tmp_path, "torchrun")
    assert_same_checkpoint(tmp_path)
    logged = (tmp_path / "monitor" / "team" / "Train_Samples_lr.csv").read_text().split()
    assert logged[0] == "step,lr" and [row.split(",")[1] for row in logged[1:]] == \
        ["0.01"] * 3  # the named config was read; its optimizer was not
