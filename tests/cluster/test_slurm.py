"""distrun on a real SLURM cluster: two nodes (each its own network namespace and address),
slurmctld, slurmd and munge really running (see conftest.py and slurm_rig.sh).

- The sbatch script of `distrun config export --format slurm` runs `distrun launch` under
  srun on both nodes; each reads its rank, the node count and node 0's address from
  SLURM's variables, and the world forms across the two addresses.
- `srun distrun launch` directly does the same.
- A crashing rank fails the SLURM job, with distrun's report in the job's output.
- `slurm.tasks: per-gpu`: one `distrun launch` per task, each running one rank; its
  container options (pyxis) are recorded by a stand-in srun, pyxis cannot run here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

# one SLURM rig per machine, shared by the workers of a run (conftest.py); the group keeps
# its tests in one worker where pytest-xdist honours it
pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.xdist_group("slurm")]

JOB = """\
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if rank == int(os.environ.get("CRASH_RANK", "-1")):
    raise RuntimeError(f"rank {rank} crashed on purpose")
t = torch.tensor([float(rank + 1)]); dist.all_reduce(t)
sys.stdout.write(f"rank {rank} world {world} sum {t.item():g} "
                 f"via {os.environ.get('GLOO_SOCKET_IFNAME')}\\n")
dist.destroy_process_group()
"""


def _job_dir(tmp_path: Path, config: str) -> Path:
    (tmp_path / "job.py").write_text(JOB)
    venv_bin = Path(sys.executable).parent
    (tmp_path / "distrun.yaml").write_text(config + (
        "slurm:\n"
        "  job_name: distrun-rig\n"
        '  time: "00:05:00"\n'
        "  setup:\n"
        f"    - export PATH={venv_bin}:$PATH\n"))
    return tmp_path


def _export(where: Path) -> Path:
    result = subprocess.run([sys.executable, "-m", "distrun", "config", "export", "--format",
                             "slurm", "distrun.yaml"], cwd=where, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    script = where / "job.sbatch"
    script.write_text(result.stdout)
    return script


def _sbatch(script: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Submit and wait; returns sbatch's exit code, the job id and the job's output."""
    result = subprocess.run(["sbatch", "--wait", script.name], cwd=script.parent, env=env,
                            capture_output=True, text=True, timeout=240)
    match = re.search(r"Submitted batch job (\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    job = match[1]
    output = (script.parent / f"distrun-{job}.out").read_text()
    return result.returncode, job, output


def _settled_state(job: str, env: dict[str, str]) -> str:
    """`scontrol show job` once the job has left COMPLETING (sbatch --wait returns when the
    batch script ends; SLURM may still be ending the job's other processes)."""
    state = ""
    for _ in range(120):
        state = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                               text=True, timeout=30).stdout
        if "JobState=COMPLETING" not in state:
            break
        time.sleep(0.5)
    return state


def _ranks(output: str) -> list[str]:
    return sorted(line for line in output.splitlines() if line.startswith("rank "))


def test_exported_sbatch_script_runs_one_world_over_two_nodes(slurm: dict[str, str],
                                                              tmp_path: Path) -> None:
    where = _job_dir(tmp_path, "script: job.py\nnnodes: 2\nnproc_per_node: 2\ntimeout: 60\n")
    code, job, output = _sbatch(_export(where), slurm)
    assert code == 0, output
    ranks = _ranks(output)
    assert [line.rsplit(" via ", 1)[0] for line in ranks] == [
        f"rank {r} world 4 sum 10" for r in range(4)], output
    # two hosts: each node's ranks left through its own interface, chosen by distrun
    assert {line.rsplit(" via ", 1)[1] for line in ranks} == {"drn1n", "drn2n"}, output
    for node in (0, 1):
        assert (f"from the SLURM job {job}: nnodes=2, node_rank={node}, master_addr=drn1"
                in output), output


def test_srun_distrun_launch_directly(slurm: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    result = subprocess.run(
        ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
         sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "1", "--timeout",
         "60", "job.py"],
        cwd=tmp_path, env=slurm, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.rsplit(" via ", 1)[0] for line in _ranks(result.stdout)] == [
        "rank 0 world 2 sum 3", "rank 1 world 2 sum 3"], result.stdout + result.stderr


def test_a_crashing_rank_fails_the_slurm_job_with_distruns_report(slurm: dict[str, str],
                                                                  tmp_path: Path) -> None:
    where = _job_dir(tmp_path, "script: job.py\nnnodes: 2\nnproc_per_node: 1\ntimeout: 60\n"
                               "env:\n  CRASH_RANK: '1'\n")
    code, job, output = _sbatch(_export(where), slurm)
    assert code != 0, output
    state = _settled_state(job, slurm)
    assert "JobState=FAILED" in state, state
    assert "distrun: error: the job failed" in output, output
    assert "rank 1 crashed on purpose" in output, output
    # node 1's distrun names its rank, unless SLURM ends the step (node 0's task exited 1)
    # before node 1's agent has seen its worker fail: then node 0's report says its rank
    # lost its peer on the other node (seen on a loaded machine, CI of 2026-11-26)
    assert "rank 1 (local rank 0)" in output or (
        "lost peer: the process at 10.215.77.2 went away" in output
        and "it may be another node" in output), output


TASK_JOB = """\
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)]); dist.all_reduce(t)
sys.stdout.write(f"rank {rank} local {os.environ['LOCAL_RANK']} of "
                 f"{os.environ['LOCAL_WORLD_SIZE']} world {world} sum {t.item():g} "
                 f"task {os.environ['SLURM_PROCID']}\\n")
dist.destroy_process_group()
"""
PYXIS_STAND_IN = """#!/bin/bash
# pyxis's options recorded and dropped, the rest given to the real srun
kept=()
for word in "$@"; do
    case "$word" in
        --container-*) printf '%s\\n' "$word" >> "$(dirname "$0")/pyxis.args" ;;
        *) kept+=("$word") ;;
    esac
done
exec SRUN "${kept[@]}"
"""


def test_per_gpu_export_runs_one_rank_per_task(slurm: dict[str, str], tmp_path: Path) -> None:
    """One node, two tasks (two processes for the rig's cores): each task's distrun runs one
    rank, LOCAL_RANK from SLURM_LOCALID; one distrun per node would have started 2 x 2."""
    (tmp_path / "job.py").write_text(TASK_JOB)
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    srun = shutil.which("srun", path=slurm.get("PATH"))
    assert srun is not None
    (stand_in / "srun").write_text(PYXIS_STAND_IN.replace("SRUN", srun))
    (stand_in / "srun").chmod(0o755)
    (tmp_path / "distrun.yaml").write_text(
        "script: job.py\nnnodes: 1\nnproc_per_node: 2\ntimeout: 60\nslurm:\n"
        "  job_name: distrun-rig\n  time: \"00:05:00\"\n  tasks: per-gpu\n"
        "  container_image: example.org#distrun/job:1\n"
        "  container_mounts: [\"$SLURM_SUBMIT_DIR:/job\"]\n"
        f"  setup:\n    - export PATH={stand_in}:{Path(sys.executable).parent}:$PATH\n")
    code, job, output = _sbatch(_export(tmp_path), slurm)
    assert code == 0, output
    assert _ranks(output) == [f"rank {r} local {r} of 2 world 2 sum 3 task {r}" for r in (0, 1)]
    for rank in (0, 1):
        assert (f"from the SLURM job {job}, one rank per task (--slurm-tasks per-gpu): rank "
                f"{rank} of 2, local rank {rank} of 2 on node 0, master drn1:") in output
    assert (tmp_path / "bin" / "pyxis.args").read_text().splitlines() == [
        "--container-image=example.org#distrun/job:1", f"--container-mounts={tmp_path}:/job"]
