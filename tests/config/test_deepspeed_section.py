"""distrun.yaml's `deepspeed:` section: its keys checked with their lines, the DeepSpeed
config the job reads checked with the job (its problems at its own path and line, the
section's keys against it), `config init` with the deepspeed launcher, and `distrun launch
--config` handing the workers DS_CONFIG (one real launch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distrun.config.load import load, parse
from distrun.config.schema import KEYS, json_schema
from tests.conftest import distrun

USERS = Path(__file__).parent / "data" / "deepspeed" / "zero2_users_notes.json"
GOOD = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0, "zero_optimization": {"stage": 2}}

# One mistake each: (file text, line, key, words of the message)
BAD = {
    "stage above 3": ("deepspeed:\n  zero_stage: 4\n", 2, "deepspeed.zero_stage",
                      "'deepspeed.zero_stage': 4 is above the maximum 3"),
    "stage as text": ("deepspeed:\n  zero_stage: two\n", 2, "deepspeed.zero_stage",
                      "expected an integer, got 'two'"),
    "offload choice": ("\ndeepspeed:\n  offload_optimizer: gpu\n", 3,
                       "deepspeed.offload_optimizer", "'gpu' is not one of none, cpu"),
    "micro batch zero": ("deepspeed:\n  micro_batch: 0\n", 2, "deepspeed.micro_batch",
                         "0 is below the minimum 1"),
    "negative clipping": ("deepspeed:\n  gradient_clipping: -1.0\n", 2,
                          "deepspeed.gradient_clipping", "-1.0 is below the minimum 0"),
    "clipping as text": ("deepspeed:\n  gradient_clipping: none\n", 2,
                         "deepspeed.gradient_clipping", "expected a number"),
    "unknown key": ("deepspeed:\n  zero_satge: 2\n", 2, "deepspeed.zero_satge",
                    "did you mean 'deepspeed.zero_stage'?"),
    "not a mapping": ("deepspeed: ds_config.json\n", 1, "deepspeed", "must be a mapping"),
    "missing file": ("launcher: deepspeed\ndeepspeed:\n  config: nope.json\n", 3,
                     "deepspeed.config", "deepspeed.config 'nope.json': no such file"),
    "offload without ZeRO": ("deepspeed:\n  zero_stage: 0\n  offload_optimizer: cpu\n", 3,
                             "deepspeed.offload_optimizer", "at zero_stage 0 DeepSpeed "
                             "ignores it"),
    "restarts": ("launcher: deepspeed\nmax_restarts: 2\n", 2, "max_restarts",
                 "the deepspeed launcher restarts nothing: max_restarts 2 cannot apply"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_section_names_the_line_and_key(case: str, tmp_path: Path) -> None:
    text, line, key, words = BAD[case]
    errors = [p for p in parse(text, str(tmp_path / "distrun.yaml")).problems
              if p.severity == "error"]
    assert len(errors) == 1, errors
    assert (errors[0].line, errors[0].key) == (line, key)
    assert words in errors[0].message, errors[0].message


def write_job(folder: Path, yaml_text: str, ds: object | None = None,
              name: str = "ds.json") -> Path:
    (folder / "train.py").write_text("")
    if ds is not None:
        (folder / name).write_text(ds if isinstance(ds, str) else json.dumps(ds, indent=2))
    path = folder / "distrun.yaml"
    path.write_text(yaml_text)
    return path


def test_the_users_zero2_config_is_checked_at_its_own_lines(tmp_path: Path) -> None:
    """Every problem `config validate ds_config.json` finds in the file the job reads, at
    the line of deepspeed.config, with the file's own path and line; errors stay errors
    (a launch would refuse the config)."""
    path = write_job(tmp_path, f"script: train.py\ndeepspeed:\n  config: {USERS}\n")
    result = distrun("config", "validate", str(path))
    alone = distrun("config", "validate", str(USERS)).stdout.splitlines()
    assert alone[-1] == f"{USERS}: 12 problem(s)" and len(alone) == 15
    expected = []
    for line in alone[:-1]:
        number, severity, message = line.removeprefix(f"{USERS}:").split(": ", 2)
        expected.append(f"{path}:3: {severity}: {USERS}:{number}: {message}")
    assert result.stdout.splitlines() == [*expected, f"{path}: 12 problem(s)"]
    assert result.returncode == 1


def test_section_keys_that_disagree_with_the_file_are_errors(tmp_path: Path) -> None:
    ds = {"train_micro_batch_size_per_gpu": 8,
          "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}
    path = write_job(tmp_path, "script: train.py\ndeepspeed:\n  config: ds.json\n"
                     "  zero_stage: 2\n  offload_optimizer: none\n  micro_batch: 4\n"
                     "  gradient_clipping: 0\n", ds)
    errors = [(p.line, p.key, p.message) for p in load(str(path)).problems
              if p.severity == "error"]
    ds_path = tmp_path / "ds.json"
    assert errors == [
        (4, "deepspeed.zero_stage", f"deepspeed.zero_stage is 2, but {ds_path}:4 sets "
         "zero_optimization.stage to 1: the job reads the file; make them agree, or remove "
         "deepspeed.zero_stage (the file decides)"),
        (5, "deepspeed.offload_optimizer", f"deepspeed.offload_optimizer is none, but "
         f"{ds_path}:6 sets zero_optimization.offload_optimizer.device to \"cpu\": the job "
         "reads the file; make them agree, or remove deepspeed.offload_optimizer (the file "
         "decides)"),
        (6, "deepspeed.micro_batch", f"deepspeed.micro_batch is 4, but {ds_path}:2 sets "
         "train_micro_batch_size_per_gpu to 8: the job reads the file; make them agree, or "
         "remove deepspeed.micro_batch (the file decides)"),
        (7, "deepspeed.gradient_clipping", f"deepspeed.gradient_clipping is 0, but {ds_path} "
         "leaves out gradient_clipping (DeepSpeed then uses 1.0): the job reads the file; "
         "make them agree, or remove deepspeed.gradient_clipping (the file decides)"),
    ]


def test_a_file_that_agrees_is_valid_and_a_torchrun_job_may_have_the_section(
        tmp_path: Path) -> None:
    path = write_job(tmp_path, "launcher: torchrun\nscript: train.py\nnproc_per_node: 2\n"
                     "deepspeed:\n  config: ds.json\n  zero_stage: 2\n  micro_batch: 8\n"
                     "  offload_optimizer: none\n  gradient_clipping: 0.0\n", GOOD)
    assert load(str(path)).problems == []


def test_the_batch_sizes_are_checked_against_the_jobs_world_size(tmp_path: Path) -> None:
    path = write_job(tmp_path, "script: train.py\nnnodes: 2\nmaster_addr: 10.0.0.1\n"
                     "nproc_per_node: 3\ndeepspeed:\n  config: ds.json\n",
                     {"train_batch_size": 16, **GOOD})
    (problem,) = load(str(path)).problems
    assert (problem.line, problem.severity) == (6, "error")
    assert problem.message.startswith(f"{tmp_path / 'ds.json'}:2: train_batch_size 16 is not "
                                      "micro batch 8 x accumulation 1 x world size 6 = 48")


def test_ds_config_beside_the_script_is_the_one_a_deepspeed_job_reads(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    write_job(tmp_path / "job", "", {**GOOD, "bf16": {"enabled": "auto"}}, "ds_config.json")
    path = tmp_path / "distrun.yaml"
    path.write_text("script: job/train.py\nlauncher: deepspeed\n")
    (problem,) = load(str(path)).problems
    assert (problem.line, problem.key, problem.severity) == (2, "launcher", "error")
    assert problem.message.startswith(f"{tmp_path / 'job' / 'ds_config.json'}:9: bf16.enabled "
                                      "is \"auto\"")
    path.write_text("script: job/train.py\n")  # torchrun, no section: not a DeepSpeed job
    assert load(str(path)).problems == []


def test_schema_and_show_carry_the_section(tmp_path: Path) -> None:
    ds = json_schema()["properties"]["deepspeed"]
    assert set(ds["properties"]) == set(KEYS["deepspeed"].keys) == {
        "config", "zero_stage", "offload_optimizer", "micro_batch", "gradient_clipping"}
    assert ds["properties"]["zero_stage"] | {"description": ""} == {
        "type": "integer", "minimum": 0, "maximum": 3, "description": ""}
    assert ds["properties"]["offload_optimizer"]["enum"] == ["none", "cpu"]
    path = write_job(tmp_path, "script: train.py\ndeepspeed:\n  micro_batch: 4\n")
    shown = json.loads(distrun("config", "show", "--json", str(path)).stdout)
    assert shown["deepspeed"] == {"config": None, "zero_stage": None, "offload_optimizer": None,
                                  "micro_batch": 4, "gradient_clipping": None}


def test_init_writes_a_deepspeed_launcher_config(tmp_path: Path) -> None:
    result = distrun("config", "init", "--non-interactive", "--launcher", "deepspeed",
                     "--script", "train.py", "--nproc-per-node", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert load(str(tmp_path / "distrun.yaml")).values["launcher"] == "deepspeed"
    answers = "train.py\ndeepspeed\n2\n4\n10.0.0.1\nbf16\n"
    run = subprocess.run([sys.executable, "-m", "distrun", "config", "init", "-o", "b.yaml"],
                         input=answers, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    written = load(str(tmp_path / "b.yaml"))
    assert [p for p in written.problems if p.severity == "error"] == []
    assert written.values == {"launcher": "deepspeed", "nnodes": 2, "nproc_per_node": 4,
                              "mixed_precision": "bf16", "script": "train.py",
                              "master_addr": "10.0.0.1"}


def test_launch_config_gives_the_workers_ds_config_unless_env_does(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    write_job(tmp_path / "conf", "", GOOD)
    (tmp_path / "conf" / "job.yaml").write_text(
        "launcher: deepspeed\nscript: train.py\ndeepspeed:\n  config: ds.json\n")
    wanted = f"DS_CONFIG={tmp_path / 'conf' / 'ds.json'}"
    (tmp_path / "train.py").write_text("")
    dry = distrun("launch", "--config", "conf/job.yaml", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert wanted in dry.stdout.split("\\\n")[0].split()
    flag = distrun("launch", "--config", "conf/job.yaml", "--env", "DS_CONFIG=mine.json",
                   "--dry-run", cwd=tmp_path)
    assert "DS_CONFIG=mine.json" in flag.stdout.split("\\\n")[0].split()
    with_env = tmp_path / "conf" / "env.yaml"
    with_env.write_text("script: train.py\nenv:\n  DS_CONFIG: other.json\n"
                        "deepspeed:\n  config: ds.json\n")
    dry = distrun("launch", "--config", str(with_env), "--dry-run", cwd=tmp_path)
    assert "DS_CONFIG=other.json" in dry.stdout.split("\\\n")[0].split()


@pytest.mark.e2e
def test_launched_workers_read_ds_config_from_the_config_file(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    (tmp_path / "conf").mkdir()
    write_job(tmp_path / "conf", "", GOOD)
    (tmp_path / "show.py").write_text(
        "import os, sys\nsys.stdout.write(f\"rank {os.environ['RANK']} ds "
        "{os.environ['DS_CONFIG']}\\n\")\n")
    (tmp_path / "conf" / "job.yaml").write_text(
        "launcher: deepspeed\nscript: show.py\nnproc_per_node: 2\n"
        "deepspeed:\n  config: ds.json\n")
    result = distrun("launch", "--config", "conf/job.yaml", cwd=tmp_path,
                     env={"DS_CONFIG": "stale.json"})
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank"))
    ds = tmp_path / "conf" / "ds.json"
    assert lines == [f"rank 0 ds {ds}", f"rank 1 ds {ds}"]
