"""The SLURM export's two conventions and its container option: golden scripts, the batch
script really run by bash (with `srun` and `scontrol` stand-ins that record what they are
given: pyxis cannot run here), and the `slurm:` keys' problems with their lines.

The per-gpu script is run on a real SLURM cluster in tests/cluster/test_slurm.py."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from distrun.config.exports import export
from distrun.config.load import load, parse
from distrun.config.schema import json_schema
from distrun.errors import InputError
from tests.conftest import distrun

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DISTRUN_UPDATE_FIXTURES") == "1"
STAND_IN = """#!/bin/bash
printf '%s\\n' "$@" > "$RECORD"
"""


def rendered(name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(GOLDEN)
    return export(load(f"{name}.yaml"), "slurm")


@pytest.mark.parametrize("name", ["pergpu", "container"])
def test_slurm_export_matches_golden(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(name, monkeypatch)
    golden = GOLDEN / f"{name}.sbatch"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def run_batch_script(text: str, tmp_path: Path) -> list[str]:
    """Run the exported batch script with bash as sbatch would on the first node, with
    stand-ins for srun (it records its arguments), scontrol and `module`; srun's words."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "module"):
        (bin_dir / tool).write_text(STAND_IN.replace("RECORD", f"RECORD_{tool.upper()}"))
    # one line at a time, as a long nodelist comes: the script must read them all (a
    # `head -n 1` there made the second write die of SIGPIPE, and pipefail the script)
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho drn1\nsleep 0.2\necho drn2\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "drn[1-2]",
           "SLURM_SUBMIT_DIR": "/home/me/exp 1", "RECORD_SRUN": str(tmp_path / "srun.args"),
           "RECORD_MODULE": str(tmp_path / "module.args")}
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "distrun: 2 node(s), master drn1\n"
    return (tmp_path / "srun.args").read_text().splitlines()


def test_container_script_runs_with_pyxis_options_on_srun(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    text = rendered("container", monkeypatch)
    words = run_batch_script(text, tmp_path)
    assert words[:4] == ["--kill-on-bad-exit=1",
                         "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
                         # $SLURM_SUBMIT_DIR expanded by the batch script, space and all
                         "--container-mounts=/home/me/exp 1:/job,/datasets:/data:ro",
                         "--container-workdir=/job"]
    assert words[4:] == ["distrun", "launch", "--nproc-per-node", "8", "train.py"]
    assert (tmp_path / "module.args").read_text() == "load\ncuda\n"  # set-up, outside
    assert "#SBATCH --ntasks-per-node=1\n" in text


def test_per_gpu_script_starts_one_distrun_per_task(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    text = rendered("pergpu", monkeypatch)
    # nproc_per_node: gpu is counted by SLURM here: slurm.gpus_per_node tasks per node
    assert "#SBATCH --ntasks-per-node=4\n" in text and "#SBATCH --gpus-per-node=4\n" in text
    words = run_batch_script(text, tmp_path)
    assert words[:4] == ["--kill-on-bad-exit=1", "distrun", "launch", "--slurm-tasks"]
    launch = words[1:]
    assert launch[3] == "per-gpu" and "--nproc-per-node" not in launch
    assert shlex.join(launch[4:]) == ("--timeout 600 --master-port 29511 --log-dir logs "
                                      "--env NCCL_DEBUG=WARN train.py --epochs 3")


BASE = "script: train.py\nnnodes: 2\nnproc_per_node: 4\n"


@pytest.mark.parametrize(("text", "line", "key", "words"), [
    (BASE + "slurm:\n  container_mounts: [/a:/b]\n", 5, "slurm.container_mounts",
     "set slurm.container_image too"),
    (BASE + "slurm:\n  container_workdir: /job\n", 5, "slurm.container_workdir",
     "set slurm.container_image too"),
    (BASE + "slurm:\n  container_image: img\n  container_mounts:\n    - /a:/b\n"
     "    - /c,/d\n", 8, "slurm.container_mounts", "SRC[:DST[:FLAGS]], no commas"),
    (BASE + "slurm:\n  container_mounts:\n    - /a:/b:ro:x\n", 6, "slurm.container_mounts",
     "expected form"),
    (BASE + "slurm:\n  container_image: 'two words'\n", 5, "slurm.container_image",
     "no spaces or commas"),
    (BASE + "slurm:\n  tasks: per-gpus\n", 5, "slurm.tasks", "did you mean 'per-gpu'"),
])
def test_slurm_key_problems_name_their_line(text: str, line: int, key: str, words: str
                                            ) -> None:
    problems = [p for p in parse(text, "distrun.yaml").problems if p.severity == "error"]
    assert [(p.line, p.key) for p in problems] == [(line, key)], problems
    assert words in problems[0].message


@pytest.mark.parametrize(("text", "key", "line", "words"), [
    ("nnodes: '1:2'\nrdzv:\n  endpoint: h:29400\n", "nnodes", 2, "elastic"),
    ("max_restarts: 2\n", "max_restarts", 2, "cannot be restarted alone"),
    ("nnodes: 2\nrdzv:\n  endpoint: h:29400\n", "rdzv.endpoint", 4, "no rendezvous"),
    ("nproc_per_node: gpu\n", "nproc_per_node", 2, "slurm.gpus_per_node"),
])
def test_per_gpu_conflicts_warn_at_validate_and_stop_the_export(
        text: str, key: str, line: int, words: str, tmp_path: Path) -> None:
    path = tmp_path / "distrun.yaml"
    path.write_text("script: train.py\nslurm:\n  tasks: per-gpu\n".replace(
        "slurm:", text + "slurm:"))
    config = load(str(path))
    warned = [p for p in config.problems if p.key == key and words in p.message]
    assert warned and warned[0].severity == "warning", config.problems
    with pytest.raises(InputError) as err:
        export(config, "slurm")
    assert err.value.message.startswith(f"{path}:{line}: {key}: slurm.tasks is per-gpu")
    if key == "max_restarts":  # once through the CLI: exit 2, the message, no traceback
        cli = distrun("config", "export", "--format", "slurm", str(path))
        assert cli.returncode == 2 and words in cli.stderr and "Traceback" not in cli.stderr


def test_schema_gives_the_mount_form_to_each_item() -> None:
    slurm = json_schema()["properties"]["slurm"]["properties"]
    assert "pattern" in slurm["container_mounts"]["items"]
    assert "pattern" not in slurm["container_mounts"]
    assert slurm["tasks"]["enum"] == ["per-node", "per-gpu"]


@pytest.mark.parametrize("name", ["pergpu", "container"])
def test_the_manual_shows_these_exports(name: str) -> None:
    manual = (Path(__file__).parents[2] / "docs" / "slurm.md").read_text()
    config = (GOLDEN / f"{name}.yaml").read_text().split("\n", 1)[1]  # less its comment
    assert f"```yaml\n{config}```" in manual
    assert f"```bash\n{(GOLDEN / f'{name}.sbatch').read_text()}```" in manual
