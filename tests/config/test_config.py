"""distrun.yaml: validation (every problem, its line and key), the commands, and launch --config."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from distrun.config.load import load, parse
from distrun.config.schema import KEYS, defaults, json_schema
from tests.conftest import distrun

# Each bad file holds one mistake: (file text, line, key, words of the message).
BAD = {
    "unknown key": ("launcher: torchrun\nnnode: 2\n", 2, "nnode", "did you mean 'nnodes'"),
    "unknown nested key": ("rdzv:\n  endpont: h:1\n", 2, "rdzv.endpont",
                           "did you mean 'rdzv.endpoint'"),
    "wrong type": ("nnodes: two\n", 1, "nnodes", "expected N or MIN:MAX"),
    "int as text": ("max_restarts: many\n", 1, "max_restarts", "expected an integer"),
    "bad choice": ("\nlauncher: torchrunn\n", 2, "launcher", "did you mean 'torchrun'"),
    "launch-only launcher": ("launcher: ray\n", 1, "launcher", "give --launcher ray to "
                             "`distrun launch --config`"),
    "nproc zero": ("nproc_per_node: 0\n", 1, "nproc_per_node", "at least 1"),
    "port too big": ("master_port: 70000\n", 1, "master_port", "above the maximum 65535"),
    "port zero": ("master_port: 0\n", 1, "master_port", "below the minimum 1"),
    "negative rank": ("node_rank: -1\n", 1, "node_rank", "below the minimum 0"),
    "bool for text": ("master_addr: yes\n", 1, "master_addr", "quote it"),
    "list for scalar": ("script:\n  - a.py\n", 2, "script", "not a list"),
    "env not a map": ("env: [A, B]\n", 1, "env", "mapping of NAME: value"),
    "env bad name": ("env:\n  1BAD: x\n", 2, "env.1BAD", "not a valid environment variable"),
    "section not a map": ("slurm: gpu\n", 1, "slurm", "must be a mapping"),
    "bad slurm time": ("slurm:\n  time: soon\n", 2, "slurm.time", "expected form"),
    "duplicate key": ("nnodes: 1\nnnodes: 2\nmaster_addr: h\n", 2, "nnodes", "duplicate key"),
    "duplicate env key": ("env:\n  A: '1'\n  A: '2'\n", 3, "env.A", "duplicate key"),
    "node rank outside": ("nnodes: 2\nmaster_addr: h\nnode_rank: 2\n", 3, "node_rank",
                          "outside 0..1"),
    "elastic without rendezvous": ("nnodes: '1:4'\nmaster_addr: h\n", 1, "nnodes",
                                   "set rdzv.endpoint"),
    "rdzv conf without c10d": ("rdzv:\n  conf:\n    join_timeout: 900\n", 2, "rdzv.conf",
                               "set rdzv.endpoint"),
    "rdzv conf with a comma": ("rdzv:\n  endpoint: h:1\n  conf:\n    a: 1,b=2\n", 4,
                               "rdzv.conf.a", "not a plain value"),
    "c10d without endpoint": ("rdzv:\n  backend: c10d\n", 2, "rdzv.backend",
                              "needs rdzv.endpoint"),
    "yaml syntax": ("launcher: torchrun\nnnodes: [1, 2\nscript: a.py\n", 3, "",
                    "YAML syntax error"),
    "not a mapping": ("- a\n- b\n", 1, "", "must be a mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_file_names_the_line_and_key(case: str) -> None:
    text, line, key, words = BAD[case]
    config = parse(text, "distrun.yaml")
    errors = [p for p in config.problems if p.severity == "error"]
    assert len(errors) == 1, errors
    assert (errors[0].line, errors[0].key) == (line, key)
    assert words in errors[0].message


def test_multi_node_without_address_is_a_warning_the_scheduler_answers() -> None:
    """Under SLURM or a PyTorchJob, launch reads node 0's address from the job."""
    (problem,) = parse("nnodes: 2\n", "distrun.yaml").problems
    assert (problem.severity, problem.line, problem.key) == ("warning", 1, "nnodes")
    assert "fine under SLURM" in problem.message


@pytest.mark.parametrize("fmt", ["torchrun", "accelerate"])
def test_command_export_of_a_multi_node_job_needs_the_address(tmp_path: Path, fmt: str
                                                              ) -> None:
    path = tmp_path / "distrun.yaml"
    path.write_text("script: train.py\nnnodes: 2\nnproc_per_node: 2\n")
    result = distrun("config", "export", "--format", fmt, str(path))
    assert result.returncode == 2, result.stdout
    assert "needs node 0's address" in result.stderr and "Traceback" not in result.stderr
    assert distrun("config", "export", "--format", "slurm", str(path)).returncode == 0


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "distrun.yaml"
    path.write_text("nnode: 2\nlauncher: mpi\nmaster_port: 0\nscript: missing.py\n")
    result = distrun("config", "validate", str(path))
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in lines] == ["1", "2", "3"]
    assert f"{path}:4: warning: script 'missing.py' does not exist" in result.stdout


def test_validate_json(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nnodes: 0\n")
    result = distrun("config", "validate", "--json", str(path))
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert data["problems"] == [{"line": 1, "key": "nnodes", "severity": "error",
                                 "message": "'nnodes': must be at least 1"}]


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_validate_unreadable_file_is_exit_2(tmp_path: Path, what: str) -> None:
    target = tmp_path / ("nope.yaml" if what == "missing" else "")
    result = distrun("config", "validate", str(target))
    assert result.returncode == 2
    assert result.stderr.startswith("distrun: error:")


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    text = "env:\n" + textwrap.indent("\n".join(lines), "  ") + "\nscript_args: *a9\n"
    started = time.process_time()  # the work done, not the wall clock of a busy machine
    config = parse(text)
    assert time.process_time() - started < 2
    assert not config.valid


def test_init_validate_show_round_trip(tmp_path: Path) -> None:
    result = distrun("config", "init", "--non-interactive", "--script", "train.py",
                     "--nnodes", "2", "--master-addr", "10.0.0.1", "--nproc-per-node", "4",
                     "--mixed-precision", "bf16", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert distrun("config", "validate", cwd=tmp_path).returncode == 0
    shown = yaml.safe_load(distrun("config", "show", cwd=tmp_path).stdout)
    assert shown == {**defaults(), "script": "train.py", "nnodes": 2, "master_addr": "10.0.0.1",
                     "nproc_per_node": 4, "mixed_precision": "bf16"}


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "distrun.yaml").write_text("# mine\n")
    result = distrun("config", "init", "--non-interactive", cwd=tmp_path)
    assert result.returncode == 2
    assert (tmp_path / "distrun.yaml").read_text() == "# mine\n"
    forced = distrun("config", "init", "--non-interactive", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "distrun.yaml.orig").read_text() == "# mine\n"


def test_interactive_init_asks_and_writes(tmp_path: Path) -> None:
    answers = "train.py\naccelerate\n2\n8\n10.1.2.3\nfp16\n"
    run = subprocess.run([sys.executable, "-m", "distrun", "config", "init"], input=answers,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    written = load(str(tmp_path / "distrun.yaml"))
    assert written.valid
    assert written.values == {"launcher": "accelerate", "nnodes": 2, "nproc_per_node": 8,
                              "mixed_precision": "fp16", "script": "train.py",
                              "master_addr": "10.1.2.3"}


def test_schema_describes_every_key() -> None:
    schema = json_schema()
    assert set(schema["properties"]) == set(KEYS)
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]["slurm"]["properties"]) == set(KEYS["slurm"].keys)
    cli = distrun("config", "schema")
    assert json.loads(cli.stdout) == schema


def test_config_commands_do_not_import_torch(tmp_path: Path) -> None:
    (tmp_path / "distrun.yaml").write_text("script: t.py\nnproc_per_node: 2\n")
    code = (
        "import sys\nfrom distrun.cli import main\n"
        "for argv in (['config', 'validate'], ['config', 'show'], ['config', 'schema'],\n"
        "             ['config', 'export', '--format', 'torchrun'],\n"
        "             ['config', 'export', '--format', 'slurm']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print('IMPORTED', sorted(m for m in ('torch', 'libcst') if m in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert "IMPORTED []" in run.stdout, run.stdout + run.stderr


def test_launch_uses_the_config_and_flags_override_it(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("import os\nprint(os.environ['DISTRUN_MIXED_PRECISION'])\n")
    (tmp_path / "distrun.yaml").write_text(
        f"script: {script}\nscript_args: [--lr, '0.1']\nnproc_per_node: 3\n"
        "mixed_precision: fp16\nenv:\n  FROM_FILE: '1'\n")
    result = distrun("launch", "--config", "distrun.yaml", "--nproc-per-node", "2",
                     "--env", "FROM_FLAG=2", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    env_line, command = result.stdout.split("\\\n")
    argv = shlex.split(command)
    assert "--nproc-per-node=2" in argv  # the flag wins over the file's 3
    assert argv[-3:] == [str(script), "--lr", "0.1"]
    assert {"FROM_FILE=1", "FROM_FLAG=2", "DISTRUN_MIXED_PRECISION=fp16"} <= set(env_line.split())


def test_launch_with_an_invalid_config_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "distrun.yaml").write_text("nnode: 2\n")
    result = distrun("launch", "--config", "distrun.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    assert "distrun.yaml:1: unknown key 'nnode'; did you mean 'nnodes'?" in result.stderr


def test_rdzv_settings_reach_torchrun_and_the_slurm_export(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    path = tmp_path / "distrun.yaml"
    path.write_text("script: train.py\nnnodes: '1:2'\nrdzv:\n  endpoint: 127.0.0.1:29400\n"
                    "  conf:\n    join_timeout: 900\n    last_call_timeout: 5\n")
    result = distrun("launch", "--config", str(path), "--rdzv-conf", "last_call_timeout=7",
                     "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--rdzv-conf=join_timeout=900,last_call_timeout=7" in result.stdout  # flag wins
    exported = distrun("config", "export", "--format", "slurm", str(path), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "--rdzv-conf join_timeout=900 --rdzv-conf last_call_timeout=5" in exported.stdout
