"""`distrun convert` options the script makes impossible (issue 25, class 10): exit 4,
the reason and the fix at the script's line, nothing written; a bad combination of
options is exit 2 before the script is read. Real files, the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.convert_helpers import TRAIN, assert_error, run, snapshot

SPAWNED = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 2)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
"""


@pytest.mark.parametrize(("options", "says"), [
    (["--sync-bn"], "train.py:9: error: --sync-bn: `model` has no BatchNorm layer"),
    (["--grad-accum-no-sync"], "train.py:1: error: --grad-accum-no-sync: no loop steps"),
    (["--eval", "shard"], "train.py:1: error: --eval shard: the script has no evaluation"),
    (["--to", "fsdp", "--sync-bn"], "error: --sync-bn: `model` has no BatchNorm"),
])
def test_an_option_the_script_makes_impossible_exits_4_and_writes_nothing(
        work: Path, options: list[str], says: str) -> None:
    before = snapshot(work)
    result = run("convert", "train.py", *options)
    assert result.exit_code == 4, result.output
    assert says in result.stdout and "fix: leave" in result.stdout
    assert "not converted, nothing written" in result.stdout
    assert snapshot(work) == before


def test_scale_lr_without_an_optimizer_exits_4(work: Path) -> None:
    (work / "train.py").write_text(TRAIN.replace(
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", "").replace(
        "        optimizer.zero_grad()\n", "").replace(
        "        optimizer.step()\n",
        "        with torch.no_grad():\n            for p in model.parameters():\n"
        "                p -= 0.1 * p.grad\n                p.grad = None\n"))
    before = snapshot(work)
    result = run("convert", "train.py", "--scale-lr", "-o", "out/")
    assert result.exit_code == 4, result.output
    assert "--scale-lr: the script builds no optimizer" in result.stdout
    assert snapshot(work) == before  # not even out/


def test_options_on_a_spawned_script_exit_4(work: Path) -> None:
    (work / "train.py").write_text(SPAWNED)
    before = snapshot(work)
    result = run("convert", "train.py", "--to", "deepspeed", "--amp", "bf16")
    assert result.exit_code == 4, result.output
    assert "train.py:15: error: the script starts its DDP workers with mp.spawn" in result.stdout
    assert "--to deepspeed, --amp bf16 cannot apply" in result.stdout
    assert snapshot(work) == before
    assert run("convert", "train.py").exit_code == 0


def test_options_the_chosen_target_cannot_honour_exit_2_before_reading(work: Path) -> None:
    (work / "train.py").write_text("this is not python (\n")  # never read
    before = snapshot(work)
    for options in (["--to", "fsdp", "--amp", "fp16"], ["--to", "deepspeed",
                                                        "--grad-accum-no-sync"],
                    ["--zero", "3"], ["--to", "deepspeed", "--zero", "3", "--eval", "shard"]):
        assert_error(run("convert", "train.py", *options))
    assert snapshot(work) == before


def test_the_option_that_takes_effect_is_written(work: Path) -> None:
    (work / "train.py").write_text(TRAIN.replace(
        "        loss = nn.functional.mse_loss(model(x), y)\n",
        "        with torch.autocast(\"cuda\", dtype=torch.float16):\n"
        "            loss = nn.functional.mse_loss(model(x), y)\n"))
    result = run("convert", "train.py", "--amp", "bf16")
    assert result.exit_code == 0, result.output
    written = (work / "train_ddp.py").read_text()
    assert 'torch.autocast("cuda", dtype=torch.bfloat16)' in written
    assert "train.py:13: amp.dtype: autocast in float16 -> `dtype=torch.bfloat16`" \
        in result.stdout


# ------------------------------------------------------------- the user's DeepSpeed config

TEAM = {"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}},
        "fp16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-5}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
        "train_batch_size": 32}


def test_the_users_config_beside_the_script_is_merged_not_replaced(work: Path) -> None:
    (work / "ds_config.json").write_text(json.dumps(TEAM, indent=2) + "\n")
    before = snapshot(work)
    stderr = assert_error(run("convert", "train.py", "--to", "deepspeed"))
    assert "ds_config.json is the user's DeepSpeed config" in stderr
    assert "keys added: fp16.auto_cast, train_micro_batch_size_per_gpu, " \
        "gradient_accumulation_steps, gradient_clipping, zero_allow_untested_optimizer, " \
        "zero_force_ds_cpu_optimizer; keys dropped: train_batch_size (was 32)" in stderr
    assert "--force" in stderr
    assert snapshot(work) == before
    result = run("convert", "train.py", "--to", "deepspeed", "--force")
    assert result.exit_code == 0, result.output
    merged = json.loads((work / "ds_config.json").read_text())
    assert json.loads((work / "ds_config.json.orig").read_text()) == TEAM
    assert {k: merged[k] for k in ("optimizer", "scheduler")} == {
        k: TEAM[k] for k in ("optimizer", "scheduler")}
    assert merged["zero_optimization"] == TEAM["zero_optimization"]
    assert merged["fp16"] == {"enabled": True, "auto_cast": True}
    assert "train.py:7: deepspeed.config_merge: ds_config.json: `train_batch_size` removed, " \
        "was 32 (line 23 of ds_config.json)" in result.stdout
    assert "ZeRO stage 1 (--zero not given), fp16" in result.stdout
    assert "warning: ds_config.json's optimizer (AdamW) is not used" in result.stdout
    assert "replaces" not in result.stdout  # the file replaced is the one merged from


def test_force_over_a_config_not_merged_from_names_what_it_loses(work: Path) -> None:
    (work / "build").mkdir()
    (work / "build" / "ds_config.json").write_text(json.dumps(TEAM))
    result = run("convert", "train.py", "--to", "deepspeed", "--force", "-o", "build/")
    assert result.exit_code == 0, result.output
    assert "warning: --force replaces build/ds_config.json, which the conversion did not " \
        "merge from: keys dropped: zero_optimization.offload_optimizer (was {\"device\": " \
        "\"cpu\"}), fp16 (was {\"enabled\": true}), optimizer" in result.stdout
    assert "keys changed: zero_optimization.stage (1 -> 2)" in result.stdout
    assert json.loads((work / "build" / "ds_config.json.orig").read_text()) == TEAM
