"""`convert --to fsdp`: what it refuses (and why), its options, the memory report.

The rewrites themselves are fixtures (fixtures/fsdp/); the proof that the result trains
like the original is end to end (tests/e2e/test_fsdp_equivalence.py).
"""

from __future__ import annotations

import textwrap

import pytest

from distrun.convert import ConvertOptions, convert_source
from distrun.convert.targets import parse_words
from distrun.errors import EXIT_BAD_INPUT, EXIT_NOT_CONVERTED
from tests.conftest import distrun

FSDP = ConvertOptions(target="fsdp")
HEAD = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4, shuffle=True)
"""
LOOP = """
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def convert(body: str, options: ConvertOptions = FSDP):  # type: ignore[no-untyped-def]
    return convert_source(textwrap.dedent(HEAD) + textwrap.dedent(body), "t.py", options)


@pytest.mark.parametrize(("body", "line", "says"), [
    ("model = nn.Linear(2, 1).half()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
     + LOOP, 7, "remove the cast and convert with --amp bf16"),
    ("model = nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
     "model = nn.Linear(2, 1)\n" + LOOP, 9, "bound again after its optimizer is built"),
    ("model = nn.Linear(2, 1)\nfor epoch in range(2):\n"
     "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
     + textwrap.indent(LOOP, "    "), 9, "built inside a loop"),
    ("model = nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
     + LOOP + "ckpt = {'model': model}\ntorch.save(ckpt, 'm.pt')\n", 15,
     "whole sharded model is put in an object saved later"),
    ("model = nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
     "def weights(m):\n    return m.state_dict()\n" + LOOP
     + "torch.save(weights(model) if model else None, 'm.pt')\n", 17, "where it may not run"),
    (textwrap.dedent("""
     class Block(nn.Module):
         def __init__(self):
             super().__init__()
             self.a = nn.Linear(2, 2)
             self.b = nn.Linear(2, 2)
             self.b.weight = self.a.weight
     class Net(nn.Module):
         def __init__(self):
             super().__init__()
             self.h = nn.ModuleList([Block() for _ in range(2)])
         def forward(self, x):
             return x
     model = Net()
     optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
     """) + LOOP, 13, "ties parameters across the blocks"),
    ("g = nn.Linear(2, 1)\nd = nn.Linear(1, 1)\nopt_g = torch.optim.SGD(g.parameters())\n"
     "opt_d = torch.optim.SGD(d.parameters())\nloss = d(g(torch.randn(1, 2))).sum()\n"
     "loss.backward()\nopt_g.step()\nopt_d.step()\n", 10, "one model trained by one"),
])
def test_what_fsdp_cannot_shard_is_refused_with_the_fix(body: str, line: int, says: str) -> None:
    result = convert(body)
    assert result.status == "unsupported"
    assert result.output == result.source
    finding = result.findings[0]
    assert (finding.line, finding.rule.split(".")[0], finding.severity) == (line, "fsdp", "error")
    assert says in finding.message + finding.fix


def test_a_state_read_before_sharding_stays_plain_and_one_after_is_gathered() -> None:
    result = convert("model = nn.Linear(2, 1)\ninit = model.state_dict()\n"
                     "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + LOOP
                     + "final = model.state_dict()\n")
    assert "init = model.state_dict()" in result.output
    assert "final = get_model_state_dict(model, options=StateDictOptions(" in result.output


def test_memory_is_stated_from_the_parameter_count_or_said_unknown() -> None:
    known = convert("model = nn.Linear(10, 4)\n"
                    "optimizer = torch.optim.Adam(model.parameters())\n" + LOOP)
    message = next(f.message for f in known.findings if f.message.startswith("memory"))
    assert "44 parameters" in message and "704 B" in message  # 44 x (4 + 4 + 8)
    unknown = convert("import sys\nmodel = nn.Linear(int(sys.argv[1]), 4)\n"
                      "optimizer = torch.optim.SGD(model.parameters())\n" + LOOP)
    assert any("cannot be known from the script" in f.message for f in unknown.findings)


def test_converting_the_fsdp_script_again_changes_nothing() -> None:
    first = convert("model = nn.Linear(2, 1)\n"
                    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + LOOP)
    again = convert_source(first.output, "t.py", FSDP)
    assert again.status == "already-distributed" and again.output == first.output


@pytest.mark.parametrize(("words", "says"), [
    (["--shard", "Block"], "--shard only applies to --to fsdp"),
    (["--to", "fsdp", "--amp", "fp16"], "use --amp bf16"),
    (["--to", "fsdp", "--grad-accum-no-sync"], "does not apply to --to fsdp"),
    (["--to", "fsdp", "--eval", "shard"], "each rank evaluates the full set"),
    (["--to", "fsdp", "--shard", "Block;x"], "class names separated by commas"),
])
def test_options_that_do_not_go_with_fsdp(words: list[str], says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_words(words)
    assert says in str(err.value)


def test_shard_names_the_block_classes() -> None:
    assert parse_words(["--to", "fsdp", "--shard", "Block,Layer"]).shard == "Block,Layer"


def test_cli_refusal_exit_code_and_option_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent(HEAD) + "model = nn.Linear(2, 1).half()\n"
                      "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + LOOP)
    result = distrun("convert", str(script), "--to", "fsdp")
    assert result.returncode == EXIT_NOT_CONVERTED, result.stdout + result.stderr
    assert "--amp bf16" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]
    bad = distrun("convert", str(script), "--shard", "Block")
    assert bad.returncode == EXIT_BAD_INPUT and "--to fsdp" in bad.stderr
