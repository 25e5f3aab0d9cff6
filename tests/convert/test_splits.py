"""Random choices of data: the no-op cases (the changes are in fixtures/data/unseeded_splits)."""

from __future__ import annotations

import textwrap

import pytest

from distrun.convert import convert_source

TRAINING = """\
import random
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split
dataset = TensorDataset(torch.randn(20, 4), torch.randn(20, 1))
{extra}
loader = DataLoader(dataset, batch_size=4, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


def same_split_changes(extra: str) -> list[str]:
    source = TRAINING.format(extra=textwrap.dedent(extra).strip())
    result = convert_source(source, "t.py")
    assert result.status == "converted"
    # TRAINING's own data, drawn once unseeded, is rank 0's too (fixtures/data/synthetic_draws)
    return [c.message for c in result.changes if c.rule == "data.same_split"
            and "`torch.randn(...)`" not in c.message]


@pytest.mark.parametrize("extra", [
    "torch.manual_seed(0)\ntrain_set, val_set = random_split(dataset, [16, 4])",
    "np.random.seed(1)\nidx = np.random.permutation(20)",
    "random.seed(1)\nidx = list(range(20))\nrandom.shuffle(idx)",
    "g = torch.Generator().manual_seed(3)\ntrain_set, val_set = random_split(dataset, [16, 4], "
    "generator=g)",
    "for fold in range(3):\n    idx = np.random.permutation(20)",
    "class Pick:\n    def draw(self):\n        return np.random.permutation(4)",
    "def folds():\n    return np.random.permutation(20)\na, b = folds(), folds()",
])
def test_seeded_per_step_or_repeated_draws_are_left_alone(extra: str) -> None:
    assert same_split_changes(extra) == []


def test_an_unseeded_split_made_once_is_rank_0s_on_every_rank() -> None:
    [message] = same_split_changes("train_set, val_set = random_split(dataset, [16, 4])")
    assert "rank0_split(random_split(...))" in message
    [message] = same_split_changes("from numpy.random import shuffle\nidx = list(range(20))\n"
                                   "shuffle(idx)")
    assert "`idx[:] = rank0_value(idx)` after it" in message
