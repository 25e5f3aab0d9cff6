"""A loader read only by a pass that does not train stays whole (the change is in
fixtures/data/statistics_pass); a pass that may train through an object the analysis
cannot follow is not one."""

from __future__ import annotations

from distrun.convert import convert_source

SOURCE = """\
import torch
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
model = torch.nn.Linear(4, 1)
swa = AveragedModel(model)


def {name}(dataset):
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    total = torch.zeros(4)
    for x, y in loader:
        {body}
    return total


train_loader = DataLoader(data, batch_size=8, shuffle=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in train_loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
{name}(data)
"""


def rules_at_line_11(name: str, body: str) -> set[str]:
    result = convert_source(SOURCE.format(name=name, body=body), "t.py")
    assert result.status == "converted", result.findings
    return {f.rule for f in [*result.changes, *result.findings] if f.line == 11}


def test_a_sum_over_the_data_is_a_statistics_pass() -> None:
    assert rules_at_line_11("mean_of", "total += x.sum(0)") == {"data.statistics_pass"}


def test_a_method_named_like_a_step_of_an_object_not_followed_may_train() -> None:
    """`swa.update_parameters(model)` per batch: the loader may feed training; it is sharded
    as a shuffling loader whose use is not followed was before."""
    rules = rules_at_line_11("refresh", "swa.update_parameters(model)")
    assert "data.statistics_pass" not in rules
    assert "data.sampler" in rules
