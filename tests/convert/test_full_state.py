"""The helpers a conversion to FSDP2 or ZeRO-3 defines for a save of the whole module
(`keep_plain_copy`, `plain_module`), run as the converted script runs them, and the ways
a script reaches its model that both targets follow. The rewrites themselves are
fixtures (fixtures/fsdp/state_forms.py, fixtures/deepspeed/zero3_state_forms.py); the
proof that the files load into the original class is end to end
(tests/e2e/test_full_state_saves.py)."""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn as nn

from distrun.convert import ConvertOptions, convert_source
from distrun.convert.names import Names
from distrun.convert.targets.full_state import keep_code, plain_code


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
        self.head = nn.Linear(4, 2)
        self.register_buffer("scale", torch.full((2,), 3.0), persistent=False)
        self.classes = ["a", "b"]


def helpers() -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec("import copy\nimport torch\n" + keep_code(Names()) + plain_code(Names()),  # noqa: S102
         namespace)
    return namespace


def test_the_plain_module_is_the_scripts_class_with_the_given_weights_and_state() -> None:
    ns = helpers()
    model = Net()
    ns["keep_plain_copy"](model)  # type: ignore[operator]
    kept = vars(model)["_plain_copy"]
    assert all(p.is_meta for p in kept.parameters()), "the copy holds no weights"
    full = {k: v + 1 for k, v in model.state_dict().items()}  # what the gathering gives
    model.eval()
    model.classes = ["a", "b", "c"]
    model.epoch = 7  # set later: named by the conversion
    plain = ns["plain_module"](model, full, "epoch")  # type: ignore[operator]
    assert type(plain) is Net and plain is not model and plain is not kept
    assert sorted(plain.state_dict()) == sorted(full)
    for key, value in plain.state_dict().items():
        assert value.device.type == "cpu" and torch.equal(value, full[key]), key
    assert not plain.training and not plain.body[2].training
    assert plain.classes == ["a", "b", "c"] and plain.epoch == 7
    assert torch.equal(plain.scale, torch.full((2,), 3.0))  # not in the state: kept
    assert "_plain_copy" not in vars(plain)
    Net().load_state_dict(plain.state_dict())  # loads into the original class
    again = ns["plain_module"](model, model.state_dict())  # type: ignore[operator]
    assert again is not plain and torch.equal(again.head.weight, model.head.weight)


def test_a_module_saved_before_it_is_sharded_is_saved_as_it_is() -> None:
    model = Net()
    assert helpers()["plain_module"](model, {}) is model  # type: ignore[operator]


HEAD = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = nn.DataParallel(nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""
TARGETS = {"fsdp": ConvertOptions(target="fsdp"),
           "zero3": ConvertOptions(target="deepspeed", zero=3)}
GATHERED = {"fsdp": "get_model_state_dict(model, ", "zero3": "GatheredParameters(list(model."}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("reach", [
    "model.module", "getattr(model, 'module', model)",
    "(model.module if hasattr(model, 'module') else model)"])
def test_every_way_to_the_model_reads_its_full_state(target: str, reach: str) -> None:
    result = convert_source(textwrap.dedent(HEAD) + f"torch.save({reach}.state_dict(), 'm.pt')\n"
                            f"torch.save({reach}, 'whole.pt')\n", "t.py", TARGETS[target])
    assert result.status == "converted", result.findings
    assert GATHERED[target] in result.output and "model.module" not in result.output
    assert "plain_module(" in result.output and "keep_plain_copy(model)" in result.output
    compile(result.output, "t.py", "exec")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_function_reading_the_state_in_a_saved_object_runs_on_every_rank(target: str) -> None:
    source = textwrap.dedent(HEAD) + textwrap.dedent("""
        def cpu_weights(m):
            return {k: v.cpu() for k, v in m.module.state_dict().items()}
        torch.save({"weights": cpu_weights(model)}, "m.pt")
        """)
    result = convert_source(source, "t.py", TARGETS[target])
    assert ("cpu_weights_value = cpu_weights(model)  # every rank: it gathers the sharded "
            'weights\nif RANK == 0:\n    torch.save({"weights": cpu_weights_value}, "m.pt")'
            ) in result.output
