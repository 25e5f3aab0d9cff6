"""batch_loss: the whole-batch forms it recognises, what it leaves alone, and when a
call is gathered or only reported."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from distrun.convert import convert_source
from distrun.convert.analysis import Facts
from distrun.convert.batch_forms import ITSELF, STATISTICS, TWO, form_of


def forms(code: str) -> list[str]:
    module = cst.parse_module(
        f"import torch\nimport numpy as np\nimport torch.nn.functional as F\nx = {code}\n")
    facts = Facts.build(module)
    return [form.kind for node in facts.parent if (form := form_of(facts, node))]


@pytest.mark.parametrize(("code", "kind"), [
    ("z @ z.T", ITSELF), ("z @ z.t()", ITSELF), ("torch.mm(z, z.t())", ITSELF),
    ("torch.matmul(z, z.transpose(0, 1))", ITSELF), ("z.mm(z.T)", ITSELF),
    ("z @ torch.t(z)", ITSELF), ('torch.einsum("ic,jc->ij", z, z)', ITSELF),
    ("torch.cdist(z, z)", ITSELF), ("torch.pdist(z)", ITSELF),
    ("F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2)", ITSELF),
    ("sim(z[:, None], z[None, :])", ITSELF), ("image @ text.T", TWO),
    ('torch.einsum("nc,mc->nm", q, k)', TWO), ("z.std(0)", STATISTICS),
    ("torch.var(z, dim=0)", STATISTICS), ("z - z.mean(0)", STATISTICS),
])
def test_the_forms_it_recognises(code: str, kind: str) -> None:
    assert forms(code) == [kind]


@pytest.mark.parametrize("code", [
    "x @ self.weight.T",  # a layer by hand
    "x @ W.T",
    "q @ k.transpose(-2, -1)",  # attention: the tokens of each sample
    "torch.mm(a, b)",
    "z.mean(0)",  # a mean alone averages as DDP does
    "z.sum(0)",
    "z.std()",
    "np.std(z, 0)",
    'torch.einsum("bij,bjk->bik", a, b)',
])
def test_what_is_not_a_form(code: str) -> None:
    assert forms(code) == []


TRAINING = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

model = nn.Linear(8, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(16, 8), torch.randn(16, 8))
loader = DataLoader(data, batch_size=4, shuffle=True)
"""


def findings(extra: str) -> list[str]:
    result = convert_source(textwrap.dedent(TRAINING) + textwrap.dedent(extra), "t.py")
    return [f.rule for f in result.findings if f.rule.startswith("batch_loss")] + [
        c.rule for c in result.changes if c.rule.startswith("batch_loss")]


@pytest.mark.parametrize("extra", [
    # per-sample losses
    """
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    """,
    # a similarity under no_grad (a kNN monitor) in the training loop
    """
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            z = model(x)
            monitor = (z @ z.T).mean()
    """,
    # statistics of the whole data set, before training
    """
    X = data.tensors[0]
    X = (X - X.mean(0)) / X.std(0)
    for x, y in loader:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    """,
    # a Gram matrix that is not a loss, attention in a model
    """
    def gram_matrix(features):
        return torch.mm(features, features.t())

    class Attention(nn.Module):
        def forward(self, q, k):
            return q @ k.transpose(-2, -1)

    for x, y in loader:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    """,
    # an in-batch loss used only to evaluate, under no_grad (on every rank's whole set)
    """
    def nt_xent(z1, z2):
        z = torch.cat([z1, z2])
        return (z @ z.T).mean()

    for x, y in loader:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        print(nt_xent(model(data.tensors[0]), model(data.tensors[1])))
    """,
])
def test_leaves_alone(extra: str) -> None:
    assert findings(extra) == []


def test_a_loss_helper_also_run_by_evaluation_is_reported_not_gathered() -> None:
    extra = """
    def nt_xent(z1, z2):
        z = torch.cat([z1, z2])
        return (z @ z.T).logsumexp(1).mean()

    def step(x, y):
        return nt_xent(model(x), model(y))

    for x, y in loader:
        step(x, y).backward()
        optimizer.step()
    for x, y in loader:
        print(step(x, y).item())
    """
    result = convert_source(textwrap.dedent(TRAINING) + textwrap.dedent(extra), "t.py")
    assert "gather_batch" not in result.output
    (finding,) = [f for f in result.findings if f.rule == "batch_loss.per_rank"]
    assert "also runs where no backward follows" in finding.message


def test_a_loss_with_a_sum_reduction_is_reported_not_gathered() -> None:
    extra = """
    def info_nce(q, k):
        logits = q @ k.T
        return F.cross_entropy(logits, torch.arange(q.shape[0]), reduction="sum")

    for x, y in loader:
        info_nce(model(x), model(y)).backward()
        optimizer.step()
    """
    result = convert_source(textwrap.dedent(TRAINING) + textwrap.dedent(extra), "t.py")
    assert "gather_batch" not in result.output
    (finding,) = [f for f in result.findings if f.rule == "batch_loss.per_rank"]
    assert 'reduction="sum"' in finding.message


def test_a_loss_returned_by_a_training_step_is_gathered_there() -> None:
    extra = """
    def nt_xent(z1, z2, temperature=0.5):
        z = F.normalize(torch.cat([z1, z2]), dim=1)
        return (z @ z.T / temperature).logsumexp(1).mean()

    def training_step(x, y):
        z1, z2 = model(x), model(y)
        return nt_xent(z1, z2)

    for x, y in loader:
        training_step(x, y).backward()
        optimizer.step()
    """
    result = convert_source(textwrap.dedent(TRAINING) + textwrap.dedent(extra), "t.py")
    assert "return nt_xent(gather_batch(z1), gather_batch(z2))" in result.output
    assert [c.rule for c in result.changes].count("batch_loss.gather") == 1


def test_a_loss_module_whose_helper_holds_a_form_is_gathered_once_at_its_call() -> None:
    extra = """
    class ContrastiveLoss(nn.Module):
        def __init__(self, temperature=0.5):
            super().__init__()
            self.temperature = temperature

        def similarity(self, z):
            return z @ z.T / self.temperature

        def forward(self, z1, z2):
            z = torch.cat([z1, z2])
            sim = self.similarity(z)
            return (sim - z.std(0).mean()).logsumexp(1).mean()

    criterion = ContrastiveLoss()
    for x, y in loader:
        loss = criterion(model(x), model(y))
        loss.backward()
        optimizer.step()
    """
    result = convert_source(textwrap.dedent(TRAINING) + textwrap.dedent(extra), "t.py")
    assert "criterion(gather_batch(ddp_model(x)), gather_batch(ddp_model(y)))" in result.output
    assert "gather_batch(gather_batch" not in result.output
    assert [f for f in result.findings if f.rule.startswith("batch_loss")] == []
