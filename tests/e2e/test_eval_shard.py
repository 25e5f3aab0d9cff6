"""`--eval shard` beyond plain DDP: with accelerate and DeepSpeed the printed evaluation is
the single process's; with BatchNorm, every shard evaluates rank 0's statistics, so the
sharded evaluation prints what the full one prints.

(Plain DDP on three corpus scripts: tests/e2e/test_corpus_equivalence.py.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import CORPUS, distrun
from tests.e2e.test_corpus_equivalence import eval_lines, run_single, run_two

pytestmark = pytest.mark.e2e

BATCHNORM = """\
import os
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total += nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    model.train()
    return total, correct


def main():
    torch.manual_seed(0)
    x, y = torch.randn(64, 6) * 3 + 1, torch.randint(0, 3, (64,))
    train = DataLoader(TensorDataset(x, y), batch_size=int(os.environ["BATCH_SIZE"]),
                       shuffle=True)
    test = DataLoader(TensorDataset(x[:37], y[:37]), batch_size=8)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for xb, yb in train:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        total, correct = evaluate(model, test)
        print(f"EVAL epoch {epoch} loss {total:.6f} correct {correct}")


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("name", "target"), [("eval_loop.py", "accelerate"),
                                              ("helper_loaders.py", "deepspeed")])
def test_sharded_evaluation_with_other_targets(name: str, target: str, tmp_path: Path) -> None:
    if target == "deepspeed":
        pytest.importorskip("deepspeed")
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    single = run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    conv = distrun("convert", str(script), "--to", target, "--eval", "shard",
                   "-o", str(converted))
    assert conv.returncode == 0, conv.stdout + conv.stderr
    assert "sampler=range(RANK, len(" in converted.read_text()
    multi = run_two(converted, tmp_path, target)
    assert eval_lines(multi.stdout) == eval_lines(single.stdout)
    assert eval_lines(single.stdout)


def test_sharded_evaluation_uses_rank_0s_batchnorm_statistics(tmp_path: Path) -> None:
    """Each rank's BatchNorm statistics come from its own half of the batch: without rank
    0's broadcast, rank 1's shard would be evaluated by another model."""
    script = tmp_path / "bn.py"
    script.write_text(BATCHNORM)
    printed = {}
    for mode in ("full", "shard"):
        converted = tmp_path / f"bn_{mode}.py"
        conv = distrun("convert", str(script), "--eval", mode, "-o", str(converted))
        assert conv.returncode == 0, conv.stdout + conv.stderr
        printed[mode] = eval_lines(run_two(converted, tmp_path).stdout)
    assert len(printed["full"]) == 3
    assert printed["shard"] == printed["full"]


def test_sharded_evaluation_does_not_go_with_zero3(tmp_path: Path) -> None:
    script = tmp_path / "eval_loop.py"
    shutil.copy(CORPUS / "eval_loop.py", script)
    result = distrun("convert", str(script), "--to", "deepspeed", "--zero", "3",
                     "--eval", "shard")
    assert result.returncode == 2
    assert "--eval shard does not apply to --zero 3" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_loop.py"]
