"""loss.batch_sum: which `.sum()` of a loss is a sum over the batch (scaled where it is
made), and which is not (a penalty on the weights, a divisor, normalised weights, a
gradient, a per-sample backward, the branch a `reduction` argument picks)."""

from __future__ import annotations

import textwrap

import pytest

from distrun.convert import convert_source

TRAINING = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def scaled(step: str) -> list[str]:
    """The sums the conversion of TRAINING + a loop of `step` scales."""
    loop = "for x, y in loader:\n" + textwrap.indent(textwrap.dedent(step), "    ") + \
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    result = convert_source(TRAINING + loop, "t.py")
    return [line.strip() for line in result.output.splitlines() if "batch_sum(" in line
            and not line.lstrip().startswith("def ")]


@pytest.mark.parametrize("step", [
    "loss = ((model(x) - y) ** 2).sum()\n",
    "out = model(x)\nloss = F.mse_loss(out, y) + 0.1 * torch.sum(out.abs())\n",
    "out = model(x)\nsq = (out - y) ** 2\nloss = sq.sum() + sum(p.pow(2).sum() for p in "
    "model.parameters())\n",
])
def test_a_sum_over_the_batch_is_scaled(step: str) -> None:
    found = scaled(step)
    assert len(found) == 1 and found[0].count("batch_sum(") == 1, found
    assert "batch_sum(p." not in found[0], found


@pytest.mark.parametrize("step", [
    # a mean: divided afterwards, by a count or a reciprocal
    "loss = ((model(x) - y) ** 2).sum() / x.size(0)\n",
    "loss = (1.0 / len(x)) * ((model(x) - y) ** 2).sum()\n",
    # a divisor and normalised weights: a weighted mean
    "w = y.abs()\nloss = (w * (model(x) - y) ** 2).sum() / w.sum()\n",
    "w = 1.0 / (y.abs() + 1)\nw2 = w / w.sum()\nloss = (w2 * (model(x) - y) ** 2).sum()\n",
    # a penalty on the weights alone
    "loss = F.mse_loss(model(x), y) + 0.01 * sum(p.pow(2).sum() for p in model.parameters())\n",
    # a gradient's inner product (IRM's penalty): no batch sum
    "out = model(x)\ng = torch.autograd.grad(F.mse_loss(out, y), [out], create_graph=True)[0]\n"
    "loss = F.mse_loss(out, y) + torch.sum(g * g)\n",
])
def test_what_is_no_sum_over_the_batch_is_left(step: str) -> None:
    assert scaled(step) == []


def test_the_branch_a_reduction_argument_picks_is_left() -> None:
    step = ("def loss_fn(out, y, reduction='mean'):\n"
            "    loss = (out - y) ** 2\n"
            "    return loss.sum() if reduction == 'sum' else loss.mean()\n"
            "loss = loss_fn(model(x), y)\n")
    assert scaled(step) == []


def test_a_backward_for_other_tensors_is_left() -> None:
    code = TRAINING + textwrap.dedent("""\
        for x, y in loader:
            loss = ((model(x) - y) ** 2).sum()
            loss.backward(inputs=[model.weight])
            optimizer.step()
        """)
    assert "batch_sum(" not in convert_source(code, "t.py").output


def test_the_backward_of_an_input_optimised_by_hand_is_left() -> None:
    """TRADES' l_2 attack: a perturbation `delta` with an optimizer of its own, its loss
    a sum (`size_average=False`): no model's gradients for DDP to average."""
    code = TRAINING + textwrap.dedent("""\
        criterion = nn.MSELoss(reduction="sum")
        for x, y in loader:
            delta = torch.zeros_like(x, requires_grad=True)
            optimizer_delta = torch.optim.SGD([delta], lr=0.1)
            for _ in range(3):
                optimizer_delta.zero_grad()
                attack = -criterion(model(x + delta), y)
                attack.backward()
                optimizer_delta.step()
            loss = criterion(model(x + delta.detach()), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    output = convert_source(code, "t.py").output
    assert "(loss * WORLD_SIZE).backward()" in output and "(attack * " not in output
