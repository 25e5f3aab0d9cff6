"""Checkpoints under FSDP2 and ZeRO-3 (issue 25, class 9): every way a script reaches the
model's state gives the full, plain state on the saving rank.

One script (tests/convert/fixtures/fsdp/state_forms.py: the notes' DataParallel idiom)
saves its model each epoch in every form: `model.module.state_dict()`, the wrapper's own
`model.state_dict()` (keys `module.*`), a helper's comprehension over
`getattr(m, "module", m).state_dict()` inside a checkpoint dict, the whole module
(`torch.save(m.module, path)` in a helper, with an attribute set on it), a method of the
model saving `self.state_dict()`, a `copy.deepcopy` of the best epoch's state,
`{k: v.cpu() for ...}` at the end. Converted
with `--to fsdp` and with `--to deepspeed --zero 3` (every weight sharded:
`stage3_param_persistence_threshold` 0), run on 2 CPU processes with 32 samples per rank
against the original on one process with 64 (one batch per epoch): each file loads here,
in a plain process, into the original class with `strict=True`, and equals the
original's file to 1e-5. Before the fix: DTensor shards under FSDP ("mixed torch.Tensor
and DTensor"), empty tensors (shape (0,)) under ZeRO-3, a pickling error for the whole
module, and a hang where rank 0 alone called the helper that gathers.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.conftest import ROOT, distrun, run_cmd
from tests.e2e.test_corpus_equivalence import imported_modules

pytestmark = pytest.mark.e2e
SCRIPT = ROOT / "tests" / "convert" / "fixtures" / "fsdp" / "state_forms.py"
STATES = ["module_state.pt", "method_state.pt", "last_cpu.pt", "best.pt"]  # plain keys
TARGETS = {"fsdp": ["--to", "fsdp"], "zero3": ["--to", "deepspeed", "--zero", "3"]}


def original_module(script: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("original", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its main guard does not run
    return module


def assert_same(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        assert type(got[key]) is torch.Tensor, (key, type(got[key]))
        torch.testing.assert_close(got[key], value, atol=1e-5, rtol=1e-5, msg=key)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_form_of_the_state_saved_loads_into_the_original_class(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if target == "zero3":
        pytest.importorskip("deepspeed")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    shutil.copy(SCRIPT, one / "train.py")
    single = run_cmd([sys.executable, "train.py"], cwd=one, env={"BATCH_SIZE": "64"})
    assert single.returncode == 0, single.stderr
    shutil.copy(SCRIPT, two / "train.py")
    converted = distrun("convert", "train.py", *TARGETS[target], "-o", "converted.py", cwd=two)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert not imported_modules((two / "converted.py").read_text()) & {"distrun"}
    if target == "zero3":  # every weight sharded, as a large model's are
        config = json.loads((two / "ds_config.json").read_text())
        config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        (two / "ds_config.json").write_text(json.dumps(config))
    launched = distrun("launch", "--nproc-per-node", "2", "converted.py", cwd=two,
                       env={"BATCH_SIZE": "32"}, timeout=240)
    assert launched.returncode == 0, launched.stdout + launched.stderr

    original = original_module(one / "train.py")
    monkeypatch.setattr(sys.modules["__main__"], "Net", original.Net, raising=False)

    def load(folder: Path, name: str) -> object:  # what the user's own tools would do
        return torch.load(folder / name, map_location="cpu", weights_only=False)

    for name in STATES:
        got = load(two, name)
        assert_same(got, load(one, name))  # type: ignore[arg-type]
        original.Net().load_state_dict(got, strict=True)
    wrapper = load(two, "wrapper_state.pt")
    assert_same(wrapper, load(one, "wrapper_state.pt"))  # type: ignore[arg-type]
    torch.nn.DataParallel(original.Net()).load_state_dict(wrapper, strict=True)
    checkpoint = load(two, "checkpoint.pt")
    assert checkpoint["epoch"] == 2  # type: ignore[index]
    assert_same(checkpoint["model"], load(one, "checkpoint.pt")["model"])  # type: ignore[index]
    whole, expected = load(two, "whole.pt"), load(one, "whole.pt")
    assert type(whole) is original.Net and whole.epochs_done == 3  # type: ignore[attr-defined]
    assert_same(whole.state_dict(), expected.state_dict())  # type: ignore[attr-defined]
    initial = load(two, "initial.pt")
    assert_same(initial.state_dict(), load(one, "initial.pt").state_dict())  # type: ignore[attr-defined]
