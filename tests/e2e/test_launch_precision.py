"""`distrun launch --mixed-precision` reaches a script converted `--to accelerate` (under
`--amp keep` its Accelerator() does not force a precision): with the accelerate launcher
and with torchrun, the forward pass runs under bf16 autocast when asked, not otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import distrun

pytestmark = pytest.mark.e2e

SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.said = False

    def forward(self, x):
        if not self.said:
            self.said = True
            print("AUTOCAST", torch.is_autocast_enabled("cpu"))
        return self.fc(x)


def main():
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).float(), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("launcher", "precision", "autocast"), [
    ("accelerate", ["--mixed-precision", "bf16"], "True"),
    ("torchrun", ["--mixed-precision", "bf16"], "True"),
    ("torchrun", [], "False"),
])
def test_the_launch_time_precision_reaches_an_accelerate_script(
        launcher: str, precision: list[str], autocast: str, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(SCRIPT)
    converted = distrun("convert", str(tmp_path / "t.py"), "--to", "accelerate",
                        "-o", str(tmp_path / "acc.py"))
    assert converted.returncode == 0, converted.stderr
    assert "mixed_precision" not in (tmp_path / "acc.py").read_text()
    run = distrun("launch", "--launcher", launcher, "--nproc-per-node", "2", *precision,
                  str(tmp_path / "acc.py"), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"AUTOCAST {autocast}" in run.stdout
