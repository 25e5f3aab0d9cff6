"""The types and ranges of a DeepSpeed config's values, checked as DeepSpeed 0.19.8 reads
them (distrun/config/deepspeed_types.py), by `config validate` and before a launch.

Both directions against the installed DeepSpeed, in one world-of-one process on CPU
(deepspeed_worker.py): what the checker calls valid, `deepspeed.initialize` accepts (and
trains two steps with); what it refuses, DeepSpeed either fails on or silently misreads
(each case says which, and the test holds DeepSpeed to it).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from distrun.config import deepspeed, jsonc
from tests.conftest import distrun

FINE: dict[str, Any] = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                        "gradient_clipping": 1.0, "optimizer": {
                            "type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}}


def config(**values: Any) -> dict[str, Any]:
    return {**FINE, **values}


# the configs of issue 27: (config, the key named, its line in json.dumps(indent=2) + words,
# what DeepSpeed does: "fails" with words of its error, or "misreads" with what it reads)
INVALID: dict[str, tuple[dict[str, Any], str, str, tuple[str, object]]] = {
    "micro batch a string": (config(train_micro_batch_size_per_gpu="8"),
                             "train_micro_batch_size_per_gpu", "a whole number",
                             ("fails", "'>' not supported")),
    "micro batch negative": (config(train_micro_batch_size_per_gpu=-8),
                             "train_micro_batch_size_per_gpu", "a value > 0",
                             ("fails", "has to be greater than 0")),
    "clipping a word": (config(gradient_clipping="lots"), "gradient_clipping", "a number",
                        ("fails", "not supported between")),
    "clipping true": (config(gradient_clipping=True), "gradient_clipping",
                      "reads true as 1, silently", ("misreads", {"clip": True})),
    "accumulation negative": (config(gradient_accumulation_steps=-2),
                              "gradient_accumulation_steps", "a value > 0",
                              ("fails", "has to be greater than 0")),
    "ZeRO stage 7": (config(zero_optimization={"stage": 7}), "zero_optimization.stage",
                     "one of 0, 1, 2, 3", ("fails", "validation error")),
    "zero_optimization a word": (config(zero_optimization="yes"), "zero_optimization",
                                 "needs an object", ("fails", "mapping")),
    "fp16 not an object": (config(fp16=True), "fp16", "needs an object", ("fails", "mapping")),
    "offload to gpu": (config(zero_optimization={"stage": 2, "offload_optimizer": {
        "device": "gpu"}}), "zero_optimization.offload_optimizer.device",
        'one of "cpu", "none", "nvme"', ("fails", "validation error")),
    "unknown ZeRO key": (config(zero_optimization={"stage": 1, "reduce_bucket": 100}),
                         "zero_optimization.reduce_bucket", "refuses keys it does not know",
                         ("fails", "Extra inputs are not permitted")),
    "flag as a string": (config(zero_optimization={"stage": 1}, optimizer={
        "type": "SGD", "params": {"lr": 0.1}}, zero_allow_untested_optimizer="false"),
        "zero_allow_untested_optimizer", "any string (\"false\" too) counts as true",
        ("misreads", {"allow_untested": "false"})),
    "warm-up steps a float": (config(optimizer={"type": "Adam", "params": {
        "lr": 1e-3, "torch_adam": True}}, scheduler={"type": "WarmupLR", "params": {
            "warmup_num_steps": 5.5}}), "scheduler.params.warmup_num_steps",
        "a whole number", ("fails", "warmup_num_steps must be a positive integer")),
    "lr negative": (config(optimizer={"type": "Adam", "params": {"lr": -1.0,
                                                                   "torch_adam": True}}),
                    "optimizer.params.lr", "a value >= 0", ("fails", "Invalid learning rate")),
}

# accepted configs: the checker says valid, DeepSpeed trains with them
VALID: dict[str, dict[str, Any]] = {
    "ZeRO 0": config(zero_optimization={"stage": 0}),
    "ZeRO 1 fp32 clip": config(zero_optimization={"stage": 1, "reduce_bucket_size": 5e8},
                               gradient_clipping=0.5),
    "ZeRO 2 bf16": config(zero_optimization={"stage": 2, "allgather_bucket_size": 2e8,
                                             "overlap_comm": False},
                          bf16={"enabled": True}),
    "ZeRO 3": config(zero_optimization={"stage": 3, "stage3_param_persistence_threshold": 0,
                                        "stage3_max_live_parameters": 1e9}),
    # torch's AdamW (`torch_adam`, allowed under offload by zero_force_ds_cpu_optimizer):
    # DeepSpeedCPUAdam would be compiled on the test machine first, 1-2 minutes of both cores
    "offload cpu": config(zero_optimization={"stage": 2, "offload_optimizer": {
        "device": "cpu", "pin_memory": False}}, optimizer={"type": "AdamW", "params": {
            "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01,
            "torch_adam": True}}, zero_force_ds_cpu_optimizer=False),
    "fp16 object off": config(fp16={"enabled": False, "loss_scale": 0,
                                    "initial_scale_power": 16}),

    "optimizer and scheduler": config(
        optimizer={"type": "Adam", "params": {"torch_adam": True, "lr": 1e-3,
                                              "betas": [0.9, 0.999], "eps": 1e-8}},
        scheduler={"type": "WarmupDecayLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 2,
            "total_num_steps": 10}}, gradient_clipping=0.0),
}


def line_of(text: str, key: str) -> int:
    """The line of `key` (dotted) in `text` written by json.dumps(indent=2)."""
    return jsonc.parse(text) and {k: m.line for k, m in deepspeed.walk(
        jsonc.parse(text).root, "")}[key]


@pytest.mark.parametrize("case", INVALID)
def test_config_validate_refuses_it_at_its_line(tmp_path: Path, case: str) -> None:
    data, key, words, _ = INVALID[case]
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(data, indent=2))
    result = distrun("config", "validate", str(path))
    assert result.returncode == 1, result.stdout
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1, result.stdout
    assert errors[0].startswith(f"{path}:{line_of(path.read_text(), key)}: error: {key} ") \
        or errors[0].startswith(f"{path}:{line_of(path.read_text(), key)}: error: unknown "
                                f"key {key}"), errors
    assert words in errors[0], errors


def test_pydantic_conversions_are_warnings_not_errors() -> None:
    text = json.dumps(config(zero_optimization={"stage": 1, "reduce_bucket_size": "500",
                                                "overlap_comm": "yes"}), indent=2)
    found = [(p.key, p.severity, p.message) for p in deepspeed.check(jsonc.parse(text))]
    assert [(k, s) for k, s, _ in found] == [
        ("zero_optimization.reduce_bucket_size", "warning"),
        ("zero_optimization.overlap_comm", "warning")], found
    assert "converts it to 500; write the number" in found[0][2]
    assert "converts it to true; write true or false" in found[1][2]


def test_the_generated_models_are_the_installed_deepspeeds() -> None:
    pytest.importorskip("deepspeed", reason="DeepSpeed is installed by `make test`")
    from tests.config.make_deepspeed_models import OUT, render

    assert render() == OUT.read_text(), (
        "DeepSpeed's models changed: run .venv/bin/python tests/config/make_deepspeed_models.py")


@pytest.mark.e2e
def test_deepspeed_agrees_in_both_directions(tmp_path: Path) -> None:
    """Every VALID config: the checker says valid and deepspeed.initialize trains with it.
    Every INVALID one: the checker refuses it and DeepSpeed fails, or runs misreading it."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is installed by `make test`")
    for name, data in VALID.items():
        found = deepspeed.check(jsonc.parse(json.dumps(data, indent=2)), 1)
        assert [p for p in found if p.severity == "error"] == [], (name, found)
    cases = {**VALID, **{name: case[0] for name, case in INVALID.items()}}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    result = subprocess.run([sys.executable, str(Path(__file__).with_name(
        "deepspeed_worker.py")), str(tmp_path / "cases.json"), port], capture_output=True,
        text=True, cwd=tmp_path, timeout=600)
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULTS ")]
    assert line, result.stdout[-2000:] + result.stderr[-3000:]
    done = json.loads(line[0][8:])
    for name, data in VALID.items():
        assert done[name]["ok"], (name, done[name])
        zero = data.get("zero_optimization", {})
        assert done[name]["stage"] == zero.get("stage", 0), (name, done[name])
    assert done["ZeRO 2 bf16"]["bf16"] is True  # (fp16 on: "not supported on your device", CPU)
    assert done["offload cpu"]["offload"] in ("cpu", "OffloadDeviceEnum.cpu")
    assert done["ZeRO 1 fp32 clip"]["clip"] == 0.5
    for name, (_, _, _, (what, expected)) in INVALID.items():
        if what == "fails":
            assert not done[name]["ok"], (name, done[name])
            assert str(expected) in done[name]["error"], (name, done[name])
        else:  # runs, reading the value otherwise than the file means
            assert done[name]["ok"], (name, done[name])
            assert isinstance(expected, dict)
            for attr, value in expected.items():
                assert done[name][attr] == value, (name, attr, done[name])
