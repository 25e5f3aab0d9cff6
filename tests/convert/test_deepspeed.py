"""`convert --to deepspeed`: what it refuses (and why), the config it writes, the CLI.

The rewrites themselves are fixtures (fixtures/deepspeed/); the proof that the result
trains like the original is end to end (tests/e2e/test_deepspeed_equivalence.py).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from distrun.config import deepspeed as ds_checker
from distrun.config import jsonc
from distrun.convert import ConvertOptions, convert_source
from distrun.errors import EXIT_BAD_INPUT, EXIT_NOT_CONVERTED, EXIT_OK
from tests.conftest import distrun

DEEPSPEED = ConvertOptions(target="deepspeed")
FIXTURES = Path(__file__).parent / "fixtures" / "deepspeed"

HEAD = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4, shuffle=True)
"""
PLAIN_LOOP = """
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def convert(body: str, options: ConvertOptions = DEEPSPEED):  # type: ignore[no-untyped-def]
    return convert_source(textwrap.dedent(HEAD) + textwrap.dedent(body), "t.py", options)


@pytest.mark.parametrize(("body", "line", "says"), [
    ("""
     for x, y in loader:
         loss = nn.functional.mse_loss(model(x), y)
         loss.backward()
         torch.nn.utils.clip_grad_value_(model.parameters(), 0.1)
         optimizer.step()
     """, 13, "clips only by the gradients' global 2-norm"),
    ("""
     import sys
     for x, y in loader:
         loss = nn.functional.mse_loss(model(x), y)
         loss.backward()
         torch.nn.utils.clip_grad_norm_(model.parameters(), float(sys.argv[1]))
         optimizer.step()
     """, 14, "max_norm is not a constant"),
    ("""
     for x, y in loader:
         loss = nn.functional.mse_loss(model(x), y)
         loss.backward()
         norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
         optimizer.step()
     """, 13, "get_global_grad_norm"),
    ('optimizer.load_state_dict(torch.load("ckpt.pt")["optimizer"])\n' + PLAIN_LOOP, 9,
     "engine.load_checkpoint"),
    ("""
     scaler = torch.cuda.amp.GradScaler()
     for x, y in loader:
         with torch.autocast("cuda"):
             loss = nn.functional.mse_loss(model(x), y)
         scaler.scale(loss).backward()
         scaler.step(optimizer)
         scaler.update()
     """, 10, "--amp fp16, --amp bf16 or --amp none"),
    ("""
     critic = nn.Linear(1, 1)
     critic_opt = torch.optim.SGD(critic.parameters(), lr=0.1)
     for x, y in loader:
         loss = critic(model(x)).mean()
         loss.backward()
         optimizer.step()
         critic_opt.step()
     """, 11, "one model trained by one optimizer: 2 found"),
])
def test_what_deepspeed_cannot_take_leaves_the_script_unchanged(body: str, line: int,
                                                               says: str) -> None:
    result = convert(body)
    assert result.status == "unsupported"
    assert result.output == result.source and not result.files
    [finding] = result.findings
    assert finding.severity == "error" and finding.line == line, finding
    assert says in finding.message + finding.fix


def test_the_same_scripts_convert_to_ddp() -> None:
    """What DeepSpeed refuses is the target's limit, not the script's fault."""
    result = convert("""
     for x, y in loader:
         loss = nn.functional.mse_loss(model(x), y)
         loss.backward()
         torch.nn.utils.clip_grad_value_(model.parameters(), 0.1)
         optimizer.step()
     """, ConvertOptions())
    assert result.status == "converted"


ACCUMULATING = """
for epoch in range(2):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_gradient_accumulation_keeps_the_scripts_condition(zero: int) -> None:
    """The script decides when to step (DeepSpeed counts nothing), and scales its loss
    itself; under ZeRO-2 and 3 the epoch-start zero_grad() that cannot drop ZeRO's
    pending gradients is a warning at its line (measured: ZeRO-1 drops them)."""
    result = convert("ACCUM = 4\n" + textwrap.dedent(ACCUMULATING),
                     ConvertOptions(target="deepspeed", zero=zero))
    assert result.status == "converted"
    config = json.loads(result.files["ds_config.json"])
    assert config["gradient_accumulation_steps"] == 4
    assert config["managed_gradient_accumulation"] is False
    assert "model_engine.backward(loss, scale_wrt_gas=False)" in result.output
    assert "        if (i + 1) % ACCUM == 0:\n            model_engine.step()" in result.output
    warnings = [f for f in result.findings if f.severity == "warning"
                and f.rule != "deepspeed.cpu_batches"]  # (the snippet names no device)
    assert [f.line for f in warnings] == ([12] if zero >= 2 else []), warnings
    assert not ds_checker.check(jsonc.parse(result.files["ds_config.json"]), world_size=2)


def test_no_accumulation_no_unmanaged_mode() -> None:
    config = json.loads(convert(PLAIN_LOOP).files["ds_config.json"])
    assert config["gradient_accumulation_steps"] == 1
    assert "managed_gradient_accumulation" not in config


def test_grad_accum_no_sync_does_not_apply_to_deepspeed(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(HEAD) + textwrap.dedent(PLAIN_LOOP))
    result = distrun("convert", str(script), "--to", "deepspeed", "--grad-accum-no-sync")
    assert result.returncode == EXIT_BAD_INPUT
    assert "only when the optimizer steps" in result.stderr


@pytest.mark.parametrize(("options", "key", "value"), [
    (DEEPSPEED, "zero_optimization", {"stage": 2}),
    (ConvertOptions(target="deepspeed", zero=1), "zero_optimization", {"stage": 1}),
    (ConvertOptions(target="deepspeed", offload_optimizer="cpu"), "zero_optimization",
     {"stage": 2, "offload_optimizer": {"device": "cpu"}}),
    (ConvertOptions(target="deepspeed", amp="fp16"), "fp16", {"enabled": True,
                                                              "auto_cast": True}),
    (ConvertOptions(target="deepspeed", amp="bf16"), "torch_autocast",
     {"enabled": True, "dtype": "bfloat16"}),
    (DEEPSPEED, "train_micro_batch_size_per_gpu", 4),
    (DEEPSPEED, "gradient_clipping", 0.0),
    (DEEPSPEED, "zero_allow_untested_optimizer", True),
])
def test_config_values(options: ConvertOptions, key: str, value: object) -> None:
    config = json.loads(convert(PLAIN_LOOP, options).files["ds_config.json"])
    assert config[key] == value
    assert '"auto"' not in json.dumps(config)


@pytest.mark.parametrize(("batch", "expected"), [
    ('int(os.environ.get("BATCH", "24"))', 24),
    ("BATCH", 12),
    ("args.batch_size", 48),
])
def test_micro_batch_read_from_the_script(batch: str, expected: int) -> None:
    source = textwrap.dedent(f"""
        import argparse, os
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        BATCH = 12
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch-size", type=int, default=48)
        args = parser.parse_args()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.Adam(model.parameters())
        loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size={batch}, shuffle=True)
        for (x,) in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """)
    result = convert_source(source, "t.py", DEEPSPEED)
    config = json.loads(result.files["ds_config.json"])
    assert config["train_micro_batch_size_per_gpu"] == expected
    assert "zero_allow_untested_optimizer" not in config  # Adam is one ZeRO tests
    assert '"--local_rank", "--local-rank"' in result.output


@pytest.mark.parametrize("golden", sorted(FIXTURES.glob("*.ds_config.json")), ids=lambda p: p.stem)
def test_written_configs_pass_distruns_own_deepspeed_checks(golden: Path) -> None:
    config = ds_checker.load(str(golden), world_size=2)
    assert not [p for p in config.problems if p.severity == "error"], config.problems


def test_cli_writes_the_config_beside_the_output(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(HEAD) + textwrap.dedent(PLAIN_LOOP))
    out = tmp_path / "out"
    out.mkdir()
    result = distrun("convert", str(script), "--to", "deepspeed", "-o", str(out / "t.py"))
    assert result.returncode == EXIT_OK, result.stderr
    assert json.loads((out / "ds_config.json").read_text())["zero_optimization"]["stage"] == 2
    assert "(and " in result.stdout and "ds_config.json" in result.stdout
    # A different ds_config.json is never replaced without --force (nothing written).
    (out / "ds_config.json").write_text("{}\n")
    (out / "t.py").unlink()
    again = distrun("convert", str(script), "--to", "deepspeed", "--zero", "1",
                    "-o", str(out / "t.py"))
    assert again.returncode == EXIT_BAD_INPUT and "--force" in again.stderr
    assert not (out / "t.py").exists() and (out / "ds_config.json").read_text() == "{}\n"
    forced = distrun("convert", str(script), "--to", "deepspeed", "--zero", "1", "--force",
                     "-o", str(out / "t.py"))
    assert forced.returncode == EXIT_OK, forced.stderr
    assert (out / "ds_config.json.orig").read_text() == "{}\n"
    assert json.loads((out / "ds_config.json").read_text())["zero_optimization"]["stage"] == 1


def test_cli_refusal_exits_4_and_writes_nothing(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(HEAD) + "optimizer.load_state_dict({})\n"
                      + textwrap.dedent(PLAIN_LOOP))
    result = distrun("convert", str(script), "--to", "deepspeed", "-o", str(tmp_path / "o.py"))
    assert result.returncode == EXIT_NOT_CONVERTED
    assert "train.py:9: error:" in result.stdout and "not converted" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_deepspeed_options_need_the_deepspeed_target(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(HEAD) + textwrap.dedent(PLAIN_LOOP))
    result = distrun("convert", str(script), "--zero", "1")
    assert result.returncode == EXIT_BAD_INPUT
    assert "--zero only applies to --to deepspeed" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_only_the_models_optimizer_counts_as_the_optimizer() -> None:
    """`options.load_state_dict(...)` is not the optimizer's, whatever its name holds; the
    optimizer reached through a function's parameter is."""
    kept = convert("class Options:\n    def load_state_dict(self, state):\n        pass\n"
                   "options = Options()\noptions.load_state_dict({})\n" + PLAIN_LOOP)
    assert kept.status == "converted", kept.findings
    assert "model_engine.zero_grad()" in kept.output
    refused = convert("def resume(o):\n    o.load_state_dict({})\nresume(optimizer)\n"
                      + PLAIN_LOOP)
    assert refused.status == "unsupported"
    assert "engine.load_checkpoint" in refused.findings[0].fix


@pytest.mark.parametrize("caller", ["", "def on_exit():\n    "])
def test_an_optimizer_state_saved_by_a_helper(caller: str) -> None:
    """Where the helper is called next to the engine, every rank saves the engine's
    checkpoint after the call, at the path the caller passes; where no engine can be
    reached (a function that never runs the model), the save is a warning with the fix."""
    result = convert(PLAIN_LOOP + "def snapshot(path):\n"
                     "    torch.save(optimizer.state_dict(), path)\n"
                     f'{caller}snapshot(OUT + ".opt")\n')
    assert result.status == "converted"
    warnings = [f for f in result.findings if f.rule.startswith("deepspeed.")
                and f.rule != "deepspeed.cpu_batches"]  # (the snippet names no device)
    if caller:
        [warning] = warnings
        assert warning.line == 16 and "engine.save_checkpoint" in warning.fix
        assert "save_checkpoint(" not in result.output
    else:
        assert not warnings
        assert 'snapshot(OUT + ".opt")\nmodel_engine.save_checkpoint(str(OUT + ".opt") + ' \
            '".deepspeed", tag="zero")' in result.output


ZERO3 = ConvertOptions(target="deepspeed", zero=3)


@pytest.mark.parametrize(("tail", "line", "says"), [
    ('ckpt = [model]\ntorch.save(ckpt, "model.pt")\n', 15, "put in an object saved later"),
    ('def weights(m):\n    return m.state_dict()\n'
     'torch.save(weights(model) if model else None, "model.pt")\n', 17, "may not run"),
    ("snapshot = optimizer.state_dict()\n", 15, "only as each rank's shard"),
])
def test_what_zero3_cannot_take_is_refused_and_zero2_takes(tail: str, line: int,
                                                            says: str) -> None:
    result = convert(PLAIN_LOOP + tail, ZERO3)
    assert result.status == "unsupported" and result.output == result.source
    [finding] = result.findings
    assert finding.line == line and says in finding.message, finding
    assert convert(PLAIN_LOOP + tail).status == "converted"


def test_only_zero3_gathers_the_weights() -> None:
    tail = 'torch.save(model.state_dict(), "model.pt")\n'
    gathered = ("with deepspeed.zero.GatheredParameters(list(model.parameters())):\n"
                "    if RANK == 0:\n        torch.save(model.state_dict(), \"model.pt\")\n")
    assert gathered in convert(PLAIN_LOOP + tail, ZERO3).output
    assert "GatheredParameters" not in convert(PLAIN_LOOP + tail).output
