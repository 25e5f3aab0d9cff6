"""`distrun launch` checks the DeepSpeed config it will hand to DeepSpeed before anything
starts (distrun/launch/ds_config.py): beside the script under `--launcher deepspeed`,
named in the script's arguments, or through `--config distrun.yaml`. A config DeepSpeed
would fail on or misread: exit code 2, FILE:LINE of each error, no process started."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import distrun

SCRIPT = "from pathlib import Path\nPath('started').write_text('yes')  # uses deepspeed\n"
GOOD = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}}
AUTO = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "zero_optimization": {"stage": 2}}


def folder(tmp_path: Path, name: str, data: dict[str, object], script: str = SCRIPT) -> Path:
    (tmp_path / "train.py").write_text(script)
    (tmp_path / name).write_text(json.dumps(data, indent=2))
    return tmp_path


def test_a_bad_config_beside_the_script_stops_the_deepspeed_launcher(tmp_path: Path) -> None:
    folder(tmp_path, "ds_config.json", {**GOOD, "gradient_clipping": "lots",
                                        "zero_optimization": {"stage": 7}})
    start = time.monotonic()
    result = distrun("launch", "--launcher", "deepspeed", "--nproc-per-node", "2", "train.py",
                     cwd=tmp_path)
    took = time.monotonic() - start
    assert result.returncode == 2, result.stderr
    assert "ds_config.json:4: gradient_clipping is \"lots\": DeepSpeed needs a number" \
        in result.stderr
    assert "ds_config.json:6: zero_optimization.stage is 7: DeepSpeed takes one of 0, 1, 2, " \
        "3" in result.stderr
    assert "nothing was started" in result.stderr
    assert not (tmp_path / "started").exists()
    assert took < 30, took


@pytest.mark.parametrize("args", [["--deepspeed_config", "my_ds.json"],
                                  ["--deepspeed=my_ds.json"], ["--ds-config", "my_ds.json"]])
def test_a_config_named_in_the_scripts_arguments_is_checked(tmp_path: Path,
                                                            args: list[str]) -> None:
    folder(tmp_path, "my_ds.json", AUTO)
    result = distrun("launch", "--nproc-per-node", "2", "train.py", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "my_ds.json (named in the script's arguments)" in result.stderr
    for line, key in ((2, "train_micro_batch_size_per_gpu"),
                      (3, "gradient_accumulation_steps"), (4, "gradient_clipping")):
        assert f"my_ds.json:{line}: {key} is \"auto\": the Hugging Face Trainer fills it " \
            "in" in result.stderr
    assert "accelerate's prepare() fills it in from the batch size of the DataLoader" \
        in result.stderr
    assert not (tmp_path / "started").exists()


def test_the_default_of_the_scripts_option_is_checked(tmp_path: Path) -> None:
    script = ("import argparse\nparser = argparse.ArgumentParser()\n"
              "parser.add_argument('--deepspeed_config', default='team_ds.json')\n" + SCRIPT)
    folder(tmp_path, "team_ds.json", {**GOOD, "train_micro_batch_size_per_gpu": "8"}, script)
    result = distrun("launch", "--nproc-per-node", "2", "train.py", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "team_ds.json (the default of the script's DeepSpeed config option)" \
        in result.stderr
    assert "team_ds.json:2: train_micro_batch_size_per_gpu is \"8\": DeepSpeed needs a " \
        "whole number, and a string there fails (TypeError)" in result.stderr
    assert not (tmp_path / "started").exists()


def test_launch_config_refuses_the_file_its_job_reads(tmp_path: Path) -> None:
    folder(tmp_path, "ds_config.json", {**GOOD, "fp16": True})
    (tmp_path / "distrun.yaml").write_text("script: train.py\nlauncher: deepspeed\n"
                                           "nproc_per_node: 2\n")
    result = distrun("launch", "--config", "distrun.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "ds_config.json:8: fp16 is true: DeepSpeed reads it with its pydantic model " \
        "DeepSpeedFP16Config, which needs an object" in result.stderr
    assert not (tmp_path / "started").exists()


def test_valid_configs_and_a_trainers_autos_go_through(tmp_path: Path) -> None:
    folder(tmp_path, "ds_config.json", GOOD)
    result = distrun("launch", "--dry-run", "--launcher", "deepspeed", "--nproc-per-node", "2",
                     "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trainer = "from transformers import Trainer, TrainingArguments\n" + SCRIPT
    folder(tmp_path, "ds_config.json", AUTO, trainer)
    result = distrun("launch", "--dry-run", "--launcher", "deepspeed", "--nproc-per-node", "2",
                     "train.py", "--deepspeed", "ds_config.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # a script that does not use DeepSpeed, launched by torchrun: its JSON is not looked at
    folder(tmp_path, "ds_config.json", AUTO, "print('plain')\n")
    result = distrun("launch", "--dry-run", "--nproc-per-node", "2", "train.py",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
