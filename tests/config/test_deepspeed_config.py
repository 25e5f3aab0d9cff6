"""`distrun config validate ds_config.json`: a user's DeepSpeed config checked before a
job meets it ("auto" values, duplicate keys, batch arithmetic, clipping, ZeRO's needs).

The users' own ZeRO-2 config (tests/config/data/deepspeed/zero2_users_notes.json, from
their notes in shared/seeds, comments and all) is the main case: every line holding
"auto" must be named, and the offload section.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from distrun.config import deepspeed, jsonc
from tests.conftest import distrun

USERS = Path(__file__).parent / "data" / "deepspeed" / "zero2_users_notes.json"
FINE = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0}


def problems(text: str, world: int | None = None) -> list[tuple[int, str, str, str]]:
    """(line, key, severity, message) of each problem in a config given as text."""
    return [(p.line, p.key, p.severity, p.message)
            for p in deepspeed.check(jsonc.parse(text), world)]


def config(**values: object) -> str:
    return json.dumps({**FINE, **values}, indent=2)


def test_the_users_zero2_config_every_auto_and_the_offload_section() -> None:
    result = distrun("config", "validate", str(USERS))
    assert result.returncode == 1
    text = USERS.read_text().splitlines()
    auto_lines = [n for n, line in enumerate(text, 1) if '"auto"' in line]
    named = [int(line.split(":")[1]) for line in result.stdout.splitlines()
             if 'is "auto"' in line]
    assert named == auto_lines and len(named) == 12
    assert f'{USERS}:3: error: fp16.enabled is "auto": the Hugging Face Trainer fills it in ' \
           "(from --fp16); accelerate's prepare() fills it in from its --mixed_precision; " \
           "DeepSpeed alone drops it and uses its default, false, silently. " \
           "Fix: write true or false" in result.stdout
    offload = next(n for n, line in enumerate(text, 1) if '"offload_optimizer"' in line)
    assert (f"{USERS}:{offload}: warning: ZeRO-Offload to cpu (stage 2): the config's AdamW "
            "runs on the CPU as DeepSpeedCPUAdam") in result.stdout
    comment = next(n for n, line in enumerate(text, 1) if "//" in line)
    assert f"{USERS}:{comment}: warning: 9 comment(s): DeepSpeed reads its config with hjson" \
        in result.stdout
    assert result.stdout.rstrip().endswith(f"{USERS}: 12 problem(s)")


def test_a_config_with_concrete_values_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    path.write_text(config(train_batch_size=16, zero_optimization={"stage": 2},
                           optimizer={"type": "AdamW", "params": {"lr": 1e-3}}))
    result = distrun("config", "validate", "--world-size", "2", str(path))
    assert (result.returncode, result.stdout) == (0, f"{path}: valid\n")
    result = distrun("config", "validate", "--world-size", "3", "--json", str(path))
    assert result.returncode == 1
    assert json.loads(result.stdout)["problems"] == [{
        "line": 5, "key": "train_batch_size", "severity": "error",
        "message": "train_batch_size 16 is not micro batch 8 x accumulation 1 x world size 3 "
                   "= 24: DeepSpeed stops at initialize (\"Check batch related parameters\")"}]


# (config text, line, key, severity, words of the message): one mistake each
CASES = {
    "duplicate key": ('{"train_micro_batch_size_per_gpu": 8,\n "gradient_clipping": 0,\n'
                      ' "gradient_clipping": 1}', 3, "gradient_clipping", "error",
                      "given twice (also line 2): DeepSpeed refuses"),
    "duplicate nested key": (config(zero_optimization={"stage": 1}).replace(
        '"stage": 1', '"stage": 1, "stage": 2'), 6, "zero_optimization.stage", "error",
        "given twice"),
    "no batch size": ('{"gradient_clipping": 0.0}', 1, "train_micro_batch_size_per_gpu",
                      "error", "neither train_batch_size nor train_micro_batch_size_per_gpu"),
    "batch not a multiple": (config(train_batch_size=12, gradient_accumulation_steps=5), 5,
                             "train_batch_size", "error", "no world size satisfies"),
    "fp16 and bf16": (config(fp16={"enabled": True}, bf16={"enabled": True}), 8, "bf16",
                      "error", "both enabled"),
    "clipping left to the default": ('{"train_micro_batch_size_per_gpu": 4}', 1,
                                     "gradient_clipping", "warning", "clips gradients at 1.0"),
    "untested optimizer": (config(optimizer={"type": "SGD"}, zero_optimization={"stage": 1}),
                           5, "optimizer.type", "error", "zero_allow_untested_optimizer"),
    "typo": (config(zero_optimisation={"stage": 2}), 5, "zero_optimisation", "warning",
             "did you mean `zero_optimization`?"),
    "trailing comma": ('{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0,\n}', 2,
                       "", "warning", "trailing comma"),
    "auto elsewhere": (config(zero_optimization={"stage": 3, "stage3_max_live_parameters":
                                                 "auto"}), 7,
                       "zero_optimization.stage3_max_live_parameters", "error",
                       "drops it and uses its default, silently. Fix: write a concrete value"),
}


@pytest.mark.parametrize("case", CASES)
def test_one_mistake_is_named_at_its_line(case: str) -> None:
    text, line, key, severity, words = CASES[case]
    found = problems(text)
    assert len(found) == 1, found
    assert found[0][:3] == (line, key, severity) and words in found[0][3], found


def test_client_optimizer_under_offload_is_said_unless_the_config_allows_it() -> None:
    offload = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    [(_, _, _, message)] = problems(config(zero_optimization=offload))
    assert "refused (ZeRORuntimeException) unless" in message
    [(_, _, _, message)] = problems(config(zero_optimization=offload,
                                           zero_force_ds_cpu_optimizer=False))
    assert "refused" not in message


@pytest.mark.parametrize(("text", "line", "words"), [
    ('{"train_batch_size": 8,\n  "fp16": {enabled: true}}', 2, "expected a key in double quotes"),
    ('{"train_batch_size": 8 /* unclosed', 1, "never closed"),
    ('{"train_batch_size": 8}\n{}', 2, "extra text"),
    ('{"train_batch_size": "8\n"}', 1, "invalid control character"),
    ("", 1, "the file ends before its value"),
])
def test_what_is_not_json_is_named_with_line_and_column(tmp_path: Path, text: str, line: int,
                                                         words: str) -> None:
    path = tmp_path / "ds.json"
    path.write_text(text)
    result = distrun("config", "validate", str(path))
    assert result.returncode == 1
    assert re.match(rf"{re.escape(str(path))}:{line}: error: not JSON \(column \d+\): .*"
                    f"{re.escape(words)}", result.stdout), result.stdout


def test_other_json_and_wrong_options_are_refused_clearly(tmp_path: Path) -> None:
    other = tmp_path / "package.json"
    other.write_text('{"name": "x"}')
    result = distrun("config", "validate", str(other))
    assert result.returncode == 1 and "not a DeepSpeed config" in result.stdout
    yaml_file = tmp_path / "distrun.yaml"
    yaml_file.write_text("nnodes: 1\n")
    result = distrun("config", "validate", "--world-size", "2", str(yaml_file))
    assert result.returncode == 2
    assert "--world-size applies to a DeepSpeed config" in result.stderr


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(jsonc.JsonError, match="nested deeper than"):
        jsonc.parse("[" * 5000 + "]" * 5000)


# -- what DeepSpeed itself does with these configs ---------------------------------------

BASE = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
        "train_batch_size": 4, "gradient_clipping": 0.0,
        "optimizer": {"type": "Adam", "params": {"torch_adam": True, "lr": 1e-3,
                                                 "betas": [0.9, 0.999], "eps": 1e-8,
                                                 "weight_decay": 0.0}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                     "warmup_num_steps": 5}},
        "bf16": {"enabled": False}, "zero_optimization": {"stage": 1,
                                                          "reduce_bucket_size": 5e8}}
AUTOS = ["bf16.enabled", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
         "optimizer.params.weight_decay", "scheduler.params.warmup_min_lr",
         "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
         "gradient_accumulation_steps", "gradient_clipping", "train_batch_size",
         "train_micro_batch_size_per_gpu", "zero_optimization.reduce_bucket_size"]


def with_value(path: str, value: object, base: dict[str, object] = BASE) -> dict[str, object]:
    config = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    place = config
    for key in parents:
        place = place[key]
    place[last] = value
    return config


def without(key: str) -> dict[str, object]:
    return {k: v for k, v in BASE.items() if k != key}


@pytest.mark.e2e
def test_what_the_checker_says_is_what_deepspeed_does(tmp_path: Path) -> None:
    """Each config the checker judges is given to the installed DeepSpeed (a world of one on
    CPU): what it calls a failure fails, what it says is dropped runs with the default."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is installed by `make test`")
    import socket
    import subprocess
    import sys

    cases: dict[str, object] = {"base": BASE, **{p: with_value(p, "auto") for p in AUTOS}}
    cases["no clipping key"] = without("gradient_clipping")
    cases["untested optimizer"] = with_value("optimizer", {"type": "SGD",
                                                           "params": {"lr": 1e-3}})
    cases["batch arithmetic"] = with_value("train_batch_size", 6)
    duplicate = tmp_path / "duplicate.json"
    duplicate.write_text(json.dumps(BASE)[:-1] + ', "gradient_clipping": 1.0}')
    cases["duplicate key"] = str(duplicate)
    said = {name: problems(duplicate.read_text() if name == "duplicate key" else
                           json.dumps(config, indent=1), 1)
            for name, config in cases.items()}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    result = subprocess.run([sys.executable, str(Path(__file__).with_name("deepspeed_worker.py")),
                             str(tmp_path / "cases.json"), port], capture_output=True, text=True,
                            cwd=tmp_path)
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULTS ")]
    assert line, result.stdout[-2000:] + result.stderr[-3000:]
    done = json.loads(line[0][8:])

    assert said["base"] == [] and done["base"]["ok"], done["base"]
    for path in AUTOS:
        [(_, key, severity, message)] = said[path]
        assert (key, severity) == (path, "error")
        if "drops it and uses" in message:
            assert done[path]["ok"], (path, done[path])
            assert done[path]["bf16"] is False and done[path]["reduce_bucket_size"] == 5e8
        else:  # (lr: this config's optimizer is torch's Adam, which refuses the string)
            assert "fail" in message or "refuse" in message, message
            assert not done[path]["ok"], (path, done[path])
    [(_, _, _, message)] = said["no clipping key"]
    assert "clips gradients at 1.0" in message
    assert done["no clipping key"]["ok"] and done["no clipping key"]["clip"] == 1.0
    for name, words in (("untested optimizer", "untested ZeRO Optimizer"),
                        ("batch arithmetic", "Check batch related parameters"),
                        ("duplicate key", "gradient_clipping")):
        assert [p[2] for p in said[name]] == ["error"], said[name]
        assert not done[name]["ok"] and words in done[name]["error"], done[name]
