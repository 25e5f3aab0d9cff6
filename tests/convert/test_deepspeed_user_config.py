"""Issue 25, class 10: a user's DeepSpeed config is the base of the one `convert --to
deepspeed` writes (its values kept, each key added, changed or removed reported at a
line), and a config the script's arguments name is the one the converted script reads.
Real files beside the script (tmp_path); the end-to-end run is
tests/e2e/test_deepspeed_user_config.py, the CLI's side tests/cli/test_convert_options.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from distrun.convert import ConvertResult, convert_source
from distrun.convert.targets import parse_words

SCRIPT = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
{option}parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()

model = nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
{forward}        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
"""
FORWARD = "        loss = nn.functional.mse_loss(model(x), y)\n"
# the config: offload, fp16, AdamW and WarmupLR, with a fixed global batch
TEAM: dict[str, Any] = {
    "train_batch_size": 64, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 12},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-5, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                            "pin_memory": True}},
    "steps_per_print": 10,
}


def convert(folder: Path, words: tuple[str, ...] = (), option: str = "",
            forward: str = FORWARD, files: dict[str, Any] | None = None) -> ConvertResult:
    for name, content in (files or {}).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
    source = textwrap.dedent(SCRIPT).format(option=option, forward=forward)
    return convert_source(source, str(folder / "train.py"),
                          parse_words(["--to", "deepspeed", *words]), folder=str(folder))


def said(result: ConvertResult, rule: str) -> list[str]:
    return [f"{e.line}: {e.message}" for e in [*result.changes, *result.findings]
            if e.rule == rule]


def test_the_users_config_is_the_base_every_change_reported(tmp_path: Path) -> None:
    result = convert(tmp_path, files={"ds_config.json": TEAM})
    assert result.status == "converted", result.findings
    written = json.loads(result.files["ds_config.json"])
    kept = {k: v for k, v in TEAM.items() if k not in (
        "train_batch_size", "gradient_accumulation_steps", "gradient_clipping")}
    assert {k: written[k] for k in kept} == kept | {"fp16": TEAM["fp16"] | {"auto_cast": True}}
    assert "train_batch_size" not in written
    assert (written["gradient_accumulation_steps"], written["gradient_clipping"]) == (1, 0.5)
    assert (written["train_micro_batch_size_per_gpu"], written["zero_force_ds_cpu_optimizer"]) \
        == (16, False)
    merged = said(result, "deepspeed.config_merge")
    assert "15: ds_config.json: `train_batch_size` removed, was 64 (line 2 of " \
        "ds_config.json): DeepSpeed computes it" in "\n".join(merged), merged
    assert "21: ds_config.json: `gradient_clipping` 1.0 (line 4 of ds_config.json) -> 0.5" \
        in "\n".join(merged), merged
    assert any("`fp16.auto_cast` true added" in m for m in merged)
    assert len(merged) == 6, merged  # batch, accumulation, clipping, offload, auto_cast, total
    [base] = said(result, "deepspeed.config_base")
    assert "ZeRO stage 2 (--zero not given), fp16 (--amp keep" in base
    assert said(result, "deepspeed.config_optimizer") and said(result,
                                                             "deepspeed.config_scheduler")
    assert result.bases == {"ds_config.json": str((tmp_path / "ds_config.json").resolve())}


def test_options_given_win_and_are_reported(tmp_path: Path) -> None:
    result = convert(tmp_path, ("--zero", "1", "--amp", "bf16", "--offload-optimizer", "none"),
                     files={"ds_config.json": TEAM})
    written = json.loads(result.files["ds_config.json"])
    assert written["zero_optimization"] == {"stage": 1}
    assert "fp16" not in written and written["torch_autocast"] == {"enabled": True,
                                                                   "dtype": "bfloat16"}
    assert "zero_force_ds_cpu_optimizer" not in written
    merged = "\n".join(said(result, "deepspeed.config_merge"))
    assert "13: ds_config.json: `zero_optimization.stage` 2 (line 24 of ds_config.json) -> 1: " \
        "--zero 1" in merged
    assert "`fp16` removed, was {" in merged and "--amp bf16" in merged
    assert "`zero_optimization.offload_optimizer` removed" in merged


def test_the_users_zero3_takes_effect_in_the_script(tmp_path: Path) -> None:
    """--zero not given: the user's stage 3 is the conversion's (the weights gathered
    around a save), not only a value of the file."""
    forward = FORWARD
    source_tail = 'torch.save(model.state_dict(), "model.pt")\n'
    result = convert(tmp_path, forward=forward, files={
        "ds_config.json": {"zero_optimization": {"stage": 3}}})
    assert result.status == "converted"
    source = textwrap.dedent(SCRIPT).format(option="", forward=forward) + source_tail
    again = convert_source(source, str(tmp_path / "train.py"), parse_words(
        ["--to", "deepspeed"]), folder=str(tmp_path))
    assert "deepspeed.zero.GatheredParameters" in again.output
    assert json.loads(again.files["ds_config.json"])["zero_optimization"]["stage"] == 3
    refused = convert(tmp_path, ("--eval", "shard"))
    assert refused.status == "unsupported"
    assert refused.findings[0].rule == "deepspeed.config_zero3_eval"


def test_the_users_precision_replaces_the_scripts_autocast(tmp_path: Path) -> None:
    """--amp keep with a config that sets fp16: not refused as mixed precision in code;
    the script's autocast goes, the config's precision stays."""
    forward = "        with torch.autocast('cuda'):\n    " + FORWARD
    assert convert(tmp_path / "none", forward=forward).findings[0].rule == \
        "deepspeed.amp_in_code"
    result = convert(tmp_path, forward=forward, files={"ds_config.json": {
        "fp16": {"enabled": True, "auto_cast": False}, "gradient_clipping": 0.5}})
    assert result.status == "converted" and "autocast" not in result.output
    written = json.loads(result.files["ds_config.json"])
    assert written["fp16"] == {"enabled": True, "auto_cast": False}  # the user's, kept
    [kept] = said(result, "deepspeed.config_kept")
    assert "`fp16.auto_cast` false kept from ds_config.json" in kept


def test_a_scheduler_in_both_is_refused(tmp_path: Path) -> None:
    result = convert(tmp_path, forward=FORWARD, files={"ds_config.json": TEAM})
    assert result.status == "converted"
    source = textwrap.dedent(SCRIPT).format(option="", forward=FORWARD).replace(
        "loader = DataLoader", "sched = torch.optim.lr_scheduler.StepLR(optimizer, 1)\n"
        "loader = DataLoader")
    refused = convert_source(source, str(tmp_path / "train.py"),
                             parse_words(["--to", "deepspeed"]), folder=str(tmp_path))
    assert refused.status == "unsupported" and refused.output == refused.source
    [finding] = refused.findings
    assert finding.rule == "deepspeed.config_scheduler" and finding.line == 15
    assert "WarmupLR" in finding.message and "StepLR" in finding.message


@pytest.mark.parametrize(("option", "files", "name"), [
    ('parser.add_argument("--deepspeed_config", default="configs/z1.json")\n',
     {"configs/z1.json": {"zero_optimization": {"stage": 1}}}, "configs/z1.json"),
    ('parser.add_argument("--deepspeed", type=str, default=None)\n',
     {"team.json": {"zero_optimization": {"stage": 1}}}, "team.json"),
    ("", {"team.json": {"zero_optimization": {"stage": 1}}}, "ds_config.json"),
])
def test_the_config_named_by_the_script_is_the_one_written_and_read(
        tmp_path: Path, option: str, files: dict[str, Any], name: str) -> None:
    result = convert(tmp_path, option=option, files=files)
    assert list(result.files) == [name]
    assert json.loads(result.files[name])["zero_optimization"]["stage"] == 1
    assert f'"{name}")' in result.output  # $DS_CONFIG's default, beside the script
    if option:
        dest = "deepspeed_config" if "_config" in option else "deepspeed"
        assert f'if args.{dest}:  # distrun: deepspeed.initialize reads the config' \
            in result.output
        assert f'os.environ["DS_CONFIG"] = args.{dest}' in result.output
        assert said(result, "deepspeed.config_named")


def test_what_is_not_a_deepspeed_config_is_not_taken(tmp_path: Path) -> None:
    result = convert(tmp_path, files={"config.json": {"hidden_size": 8, "fp16": True},
                                      "labels.json": ["a", "b"]})
    assert result.status == "converted" and not result.bases
    assert not said(result, "deepspeed.config_base")


@pytest.mark.parametrize(("files", "rule"), [
    ({"a_ds.json": {"zero_optimization": {"stage": 1}},
      "b_ds.json": {"zero_optimization": {"stage": 2}}}, "deepspeed.config_ambiguous"),
    ({"ds_config.json": '{"zero_optimization": {"stage": 1}'}, "deepspeed.config_unreadable"),
    ({"ds_config.json": "[1, 2]"}, "deepspeed.config_unreadable"),
])
def test_a_config_that_cannot_be_the_base_is_refused(tmp_path: Path, files: dict[str, Any],
                                                     rule: str) -> None:
    result = convert(tmp_path, files=files)
    assert result.status == "unsupported" and not result.files
    assert result.findings[0].rule == rule


def test_comments_and_autos_of_the_users_config_are_said(tmp_path: Path) -> None:
    result = convert(tmp_path, files={"ds_config.json": (
        '{\n  // ours\n  "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},\n'
        '  "zero_optimization": {"stage": 1},\n}\n')})
    assert result.status == "converted"
    assert said(result, "deepspeed.config_comments")
    [check] = said(result, "deepspeed.config_check")
    assert "optimizer.params.lr is \"auto\"" in check


def test_a_default_computed_at_run_time_is_said(tmp_path: Path) -> None:
    option = ('parser.add_argument("--deepspeed_config", '
              'default=os.path.join("configs", "z.json"))\n')
    result = convert(tmp_path, option=option)
    assert result.status == "converted"
    warnings = [f for f in result.findings if f.rule == "deepspeed.config_named"]
    assert len(warnings) == 1 and "computed at run time" in warnings[0].message
