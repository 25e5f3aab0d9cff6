"""The check of the converted text: a name the conversion introduced is never read where
no earlier line defines it (issue 25, class 3), and a conversion that would write such a
script writes nothing and says why."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from distrun.convert import convert_source
from distrun.convert.analysis import Facts, ModuleInfo
from distrun.convert.defined import undefined_uses
from distrun.convert.options import ConvertOptions
from distrun.convert.pipeline import _undefined

NAMES = {"ddp_model", "DEVICE", "RANK", "scaler", "tensor"}


def uses(source: str) -> list[tuple[int, str, str | None]]:
    return [(u.line, u.name, u.function) for u in
            undefined_uses(textwrap.dedent(source), NAMES)]


@pytest.mark.parametrize(("source", "found"), [
    ("def train(model):\n    model(1)\ntrain(ddp_model)\n", [(3, "ddp_model", None)]),
    ("x = RANK\nRANK = 0\n", [(1, "RANK", None)]),
    ("def f():\n    return DEVICE\nf()\nDEVICE = 1\n", [(2, "DEVICE", "f")]),
    ("class T:\n    def fit(self):\n        scaler.step(1)\n", [(3, "scaler", "fit")]),
])
def test_a_name_read_before_any_line_defines_it_is_found(
        source: str, found: list[tuple[int, str, str | None]]) -> None:
    assert uses(source) == found


@pytest.mark.parametrize("source", [
    "for tensor in [1, 2]:\n    print(tensor)\n",
    "if True:\n    RANK = 0\nelse:\n    RANK = 1\nprint(RANK)\n",
    "def f():\n    return DEVICE\nDEVICE = 1\nf()\n",
    "def g(ddp_model):\n    return ddp_model(1)\n",
    "with open('x') as scaler:\n    scaler.read()\n",
    "try:\n    import x as DEVICE\nexcept ImportError:\n    DEVICE = None\nprint(DEVICE)\n",
    "from helpers import *\ndef f():\n    return ddp_model\n",
    "import os\nprint(os.environ.get('RANK'))\n",  # a string, not a name
])
def test_what_is_defined_in_time_is_left_alone(source: str) -> None:
    assert uses(source) == []


def test_a_conversion_that_would_read_an_undefined_name_is_refused_with_the_function() -> None:
    original = "def train(model):\n    return model(1)\n"
    info = ModuleInfo("__main__", "t.py", cst.parse_module(original))
    facts = Facts.build([info])
    broken = "def train(model):\n    return ddp_model(1)\n"
    finding = _undefined(facts, info, broken, {"ddp_model"})
    assert finding is not None
    assert (finding.line, finding.rule, finding.severity) == (1, "verify.undefined_name", "error")
    assert "`ddp_model` in `train()`" in finding.message
    assert _undefined(facts, info, original, {"ddp_model"}) is None


def test_fp16_in_a_module_that_only_defines_a_trainer_defines_its_scaler() -> None:
    """Before the check this wrote a script that read `scaler` where nothing made it."""
    source = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Trainer:
            def __init__(self, model, loader):
                self.model = model
                self.loader = loader
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def fit(self):
                for x, y in self.loader:
                    loss = nn.functional.mse_loss(self.model(x), y)
                    loss.backward()
                    self.optimizer.step()
        """)
    result = convert_source(source, "trainer.py", ConvertOptions(amp="fp16"))
    assert result.status == "converted"
    assert undefined_uses(result.output, {"scaler"}) == []
    assert "scaler.step(self.optimizer)" in result.output


def test_every_helper_the_conversion_defines_avoids_the_scripts_own_names():
    """A script binding `shard_loader_class` (or any helper name) keeps its own: the
    helper the conversion defines gets another name, and calls reach the helper."""
    from distrun.convert.names import Names
    from distrun.convert.transforms.rebuild import helper_code

    names = Names.avoiding({"shard_loader_class", "shard_loader"}, {})
    code = helper_code(names, batchy=True)
    defined = {node.name.value for node in cst.parse_module(code).body
               if isinstance(node, cst.FunctionDef)}
    assert defined == {"shard_loader_", "shard_loader_class_"}
    assert "shard_loader_class(" not in code.replace("shard_loader_class_(", "")
