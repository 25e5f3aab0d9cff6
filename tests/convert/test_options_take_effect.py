"""Issue 25, class 10: every `distrun convert` option takes effect or is refused with the
reason and the fix, never a silent no-op. The rewrites themselves are fixtures
(fixtures/amp/fp16_script_to_bf16.py, scale_lr/groups_and_schedules.py, fsdp/sync_bn.py...);
here: what the script makes impossible (exit 4, nothing converted), the no-op cases
that say so, and the facts the decisions rest on."""

from __future__ import annotations

import inspect
import textwrap

import pytest
import torch

from distrun.convert import ConvertOptions, convert_source
from distrun.convert.targets import parse_words
from distrun.convert.transforms.scale_lr import DEFAULT_LR

LOOP = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

{model}
optimizer = {optimizer}
loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
"""


def script(model: str = "model = nn.Linear(4, 1)",
           optimizer: str = "torch.optim.SGD(model.parameters(), lr=0.1)") -> str:
    return textwrap.dedent(LOOP).format(model=model, optimizer=optimizer)


def on_a_device(source: str) -> str:
    """`source` with its model on a device (GPU where there is one): a script that names
    none trains on the CPU, converted as such."""
    return source.replace("\noptimizer = ", '\nmodel.to("cuda" if torch.cuda.is_available() '
                          'else "cpu")\noptimizer = ', 1)


NET = """class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.out = nn.Sequential(nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x):
        return self.out(self.fc(x))


model = Net()"""
BY_HAND = """model = nn.Linear(4, 1)
for step in range(3):
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
"""


@pytest.mark.parametrize(("words", "source", "rule", "line", "says"), [
    (["--sync-bn"], script(), "model.sync_bn_nothing", 7, "has no BatchNorm layer"),
    (["--sync-bn"], script(NET), "model.sync_bn_nothing", 17, "`model` has no BatchNorm"),
    (["--sync-bn", "--to", "fsdp"], script(NET), "model.sync_bn_nothing", 17, "BatchNorm"),
    (["--scale-lr"], "import torch\n" + BY_HAND, "scale_lr.no_lr", 1, "builds no optimizer"),
    (["--scale-lr"], script(optimizer="torch.optim.Adam(model.parameters(), **cfg)"),
     "scale_lr.unreadable", 7, "`**` arguments"),
    (["--scale-lr"], script(optimizer="Lion(model.parameters())"), "scale_lr.unreadable", 7,
     "which distrun does not know"),
    (["--grad-accum-no-sync"], script(), "grad_accum.none_found", 1,
     "does not accumulate gradients"),
    (["--grad-accum-no-sync"], script().replace(
        "        optimizer.step()\n",
        "        if loss.item() < 1:\n            optimizer.step()\n"),
     "grad_accum.condition", 14, "reads values of the micro-step"),
    (["--eval", "shard"], script(), "evaluation.no_loader", 1, "no evaluation DataLoader"),
    (["--amp", "bf16"], script().replace(
        "        loss = nn.functional.mse_loss(model(x), y)\n        loss.backward()\n",
        "        nn.functional.mse_loss(model(x), y).backward()\n"),
     "amp.no_backward", 1, "no `loss.backward()` of a named loss"),
    (["--amp", "fp16"], script(), "amp.fp16_on_cpu", 1, "the script trains on the CPU"),
])
def test_what_the_script_makes_impossible_is_refused(words: list[str], source: str, rule: str,
                                                     line: int, says: str) -> None:
    result = convert_source(source, "t.py", parse_words(words))
    assert result.status == "unsupported" and result.output == result.source
    [finding] = result.findings
    assert (finding.rule, finding.line, finding.severity) == (rule, line, "error"), finding
    assert says in finding.message and finding.fix
    # the option's doing (--partial: a script making its batches by hand is blocked too)
    assert convert_source(source, "t.py", ConvertOptions(partial=True)).status == "converted"


def test_sync_bn_on_a_model_from_a_library_is_converted_and_says_so() -> None:
    """torchvision's models are not in the script: BatchNorm may be there (resnet18 has
    some), so the conversion is added, saying that it cannot be seen."""
    source = on_a_device(script("import torchvision\nmodel = torchvision.models.resnet18()"))
    result = convert_source(source, "t.py", ConvertOptions(sync_bn=True))
    assert "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)" in result.output
    [change] = [c for c in result.changes if c.rule == "model.sync_bn"]
    assert "if it has any" in change.message


@pytest.mark.parametrize("layer", ["nn.BatchNorm1d(8)", "torch.nn.LazyBatchNorm1d()"])
def test_sync_bn_finds_batchnorm_in_the_projects_classes(layer: str) -> None:
    source = on_a_device(script(NET.replace("nn.ReLU()", layer)))
    result = convert_source(source, "t.py", ConvertOptions(sync_bn=True))
    [change] = [c for c in result.changes if c.rule == "model.sync_bn"]
    assert "if it has any" not in change.message
    # the same script on the CPU: SyncBatchNorm does not run there, so it is not added
    cpu = convert_source(script(NET.replace("nn.ReLU()", layer)), "t.py",
                         ConvertOptions(sync_bn=True))
    assert "SyncBatchNorm" not in cpu.output
    [left] = [f for f in cpu.findings if f.rule == "model.sync_bn"]
    assert left.severity == "warning" and "trains on the CPU" in left.message


def test_amp_none_on_a_script_without_mixed_precision_says_so() -> None:
    result = convert_source(script(), "t.py", ConvertOptions(amp="none"))
    assert result.output == convert_source(script(), "t.py").output
    [note] = [f for f in result.findings if f.rule == "amp.nothing_to_remove"]
    assert note.severity == "info" and "nothing to remove" in note.message


def test_amp_bf16_on_a_bf16_script_is_kept_and_said() -> None:
    """bf16 asked on a bf16 script: nothing to change, said in the report."""
    source = script().replace(
        "        loss = nn.functional.mse_loss(model(x), y)\n",
        "        with torch.autocast(\"cpu\"):\n"
        "            loss = nn.functional.mse_loss(model(x), y)\n")
    result = convert_source(source, "t.py", ConvertOptions(amp="bf16"))
    assert not [c for c in result.changes if c.rule.startswith("amp.")]
    [note] = [f for f in result.findings if f.rule == "amp.already"]
    assert "already autocasts in bfloat16" in note.message


def test_accelerate_refuses_apex_with_its_own_mixed_precision() -> None:
    source = script().replace("import torch\n", "import torch\nfrom apex import amp\n", 1) \
        .replace("        loss.backward()\n",
                 "        with amp.scale_loss(loss, optimizer) as scaled:\n"
                 "            scaled.backward()\n")
    result = convert_source(source, "t.py", parse_words(["--to", "accelerate", "--amp", "bf16"]))
    assert result.status == "unsupported"
    assert result.findings[0].rule == "accelerate.apex_amp"
    assert convert_source(source, "t.py", parse_words(["--to", "accelerate"])).status \
        == "converted"


SPAWNED = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 2)).sum()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
"""


@pytest.mark.parametrize("words", [["--to", "deepspeed"], ["--amp", "bf16"], ["--sync-bn"],
                                   ["--scale-lr", "--eval", "shard"]])
def test_a_spawned_script_is_only_completed_so_options_are_refused(words: list[str]) -> None:
    result = convert_source(SPAWNED, "t.py", parse_words(words))
    assert result.status == "unsupported" and result.output == result.source
    [finding] = result.findings
    assert finding.rule == "detect.options_not_applied" and finding.line == 21
    assert all(w in finding.message for w in words if w.startswith("--"))
    assert convert_source(SPAWNED, "t.py").status == "converted"


def test_an_already_distributed_script_names_the_options_not_applied() -> None:
    converted = convert_source(script(), "t.py").output
    again = convert_source(converted, "t.py", parse_words(["--amp", "bf16", "--sync-bn"]))
    assert again.status == "already-distributed"
    assert "--amp bf16, --sync-bn not applied" in again.findings[0].message


def test_default_learning_rates_are_torchs() -> None:
    for name, rate in DEFAULT_LR.items():
        default = inspect.signature(getattr(torch.optim, name)).parameters["lr"].default
        assert float(rate) == float(default), name


BLOCKS = """class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.blocks(x))


model = Net()"""


def test_shard_naming_a_class_that_does_not_build_the_model_is_refused() -> None:
    """--to fsdp --shard Layer where no Layer builds the model: the option would shard
    nothing on its own (the model's classes are all in the script)."""
    result = convert_source(script(BLOCKS), "t.py", parse_words(["--to", "fsdp", "--shard",
                                                                 "Layer"]))
    assert result.status == "unsupported"
    [finding] = result.findings
    assert finding.rule == "fsdp.shard_unknown" and finding.line == 26
    assert "made of Block, Linear, Net, Sequential" in finding.message
    ok = convert_source(script(BLOCKS), "t.py", parse_words(["--to", "fsdp", "--shard",
                                                             "Block"]))
    assert ok.status == "converted" and 'type(m).__name__ in ("Block",)' in ok.output


def test_shard_on_a_library_model_cannot_be_checked_and_says_so() -> None:
    source = script("import torchvision\nmodel = torchvision.models.resnet18()")
    result = convert_source(source, "t.py", parse_words(["--to", "fsdp", "--shard",
                                                         "BasicBlock"]))
    assert result.status == "converted"
    [note] = [f for f in result.findings if f.rule == "fsdp.shard_unseen"]
    assert note.severity == "info" and "BasicBlock" in note.message
