"""One SLURM task per rank (`srun --ntasks-per-node=K distrun launch`): which convention a
task is in, the rank it runs, what contradicts it, and how its one rank is supervised.

The environments below are those slurm-wlm 22.05 gave the tasks of `srun --nodes=2
--ntasks-per-node=2` and a batch script of `--nodes=2 --ntasks-per-node=2` on the rig of
tests/cluster (recorded there); the real run is tests/cluster/test_slurm.py."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from distrun.errors import LaunchError
from distrun.launch import slurm_tasks
from distrun.launch.backends import build
from distrun.launch.resolve import resolve
from distrun.launch.spec import LaunchRequest, TaskRank
from tests.conftest import distrun

STEP = {  # task 3 of `srun --nodes=2 --ntasks-per-node=2` (job 5): node 1, local 1
    "SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "drn[1-2]", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2", "SLURM_NODELIST": "drn[1-2]", "SLURM_NTASKS": "4",
    "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "drn[1-2]", "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1",
    "SLURM_LOCALID": "1", "SLURM_PROCID": "3", "SLURM_GTIDS": "2,3"}
BATCH = {  # the batch script itself: no step, yet SLURM_NTASKS > SLURM_NNODES
    "SLURM_JOB_ID": "2", "SLURM_JOB_NODELIST": "drn[1-2]", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_NTASKS": "4",
    "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0"}
PER_NODE_STEP = {**STEP, "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
                 "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def test_a_step_of_more_tasks_than_nodes_runs_its_task_as_one_rank(script: str) -> None:
    spec = resolve(LaunchRequest(script=script), environ=STEP)
    assert spec.task == TaskRank(rank=3, local_rank=1, world_size=4, local_world_size=2)
    assert spec.nproc_per_node == 1  # not the node's K processes again
    assert (spec.nnodes, spec.node_rank, spec.master_addr) == ("2", 1, "drn1")
    assert spec.master_port == slurm_tasks.derived_port("5")
    assert spec.notes[0] == (
        "from the SLURM job 5, one rank per task (the step runs 4 tasks on 2 nodes): rank "
        f"3 of 4, local rank 1 of 2 on node 1, master drn1:{spec.master_port} (port from "
        "the job id)")
    command = build(spec)
    assert command.argv[:5] == [sys.executable, "-u", "-m", "distrun.launch.rankrun",
                                "--folder=slurm-task"]
    assert command.argv[-2:] == ["--", script]
    assert {k: command.env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                        "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "drn1", "MASTER_PORT": str(spec.master_port)}


@pytest.mark.parametrize(("environ", "mode"), [
    (BATCH, None),  # a batch script is no task, whatever --ntasks it asked for
    (PER_NODE_STEP, None),  # one task per node: distrun starts the node's processes
    (STEP, "per-node"),  # said: one distrun per task, each starting its node's processes
])
def test_one_task_per_node_is_the_node_launch_as_before(environ: dict[str, str],
                                                        mode: str | None, script: str) -> None:
    spec = resolve(LaunchRequest(script=script, nproc_per_node="2", slurm_tasks=mode),
                   environ=environ)
    assert spec.task is None and spec.nproc_per_node == 2
    assert spec.notes[0].startswith(f"from the SLURM job {environ['SLURM_JOB_ID']}: nnodes=2")


def test_per_gpu_said_makes_one_task_per_node_a_rank(script: str) -> None:
    spec = resolve(LaunchRequest(script=script, slurm_tasks="per-gpu"), environ=PER_NODE_STEP)
    assert spec.task == TaskRank(rank=1, local_rank=0, world_size=2, local_world_size=1)
    assert "(--slurm-tasks per-gpu)" in spec.notes[0]


def test_per_gpu_outside_a_slurm_task_is_refused(script: str) -> None:
    with pytest.raises(LaunchError) as err:
        resolve(LaunchRequest(script=script, slurm_tasks="per-gpu"), environ={})
    assert "not a SLURM task" in err.value.message and err.value.exit_code == 2
    assert "srun --ntasks-per-node=K" in str(err.value.hint)


@pytest.mark.parametrize(("given", "words"), [
    (dict(max_restarts=1), "--max-restarts 1: one rank per SLURM task cannot be restarted"),
    (dict(nnodes="3"), "--nnodes 3: the SLURM step runs on 2 node(s)"),
    (dict(node_rank=0), "--node-rank 0: this task is on node 1"),
    (dict(nproc_per_node="4"), "--nproc-per-node 4: SLURM runs 2 task(s) on this node"),
    (dict(rdzv_endpoint="h:29400"), "--rdzv-endpoint: one rank per SLURM task has no "
                                    "rendezvous"),
])
def test_what_contradicts_one_rank_per_task_is_refused(given: dict[str, object], words: str,
                                                       script: str) -> None:
    with pytest.raises(LaunchError) as err:
        resolve(LaunchRequest(script=script, **given), environ=STEP)  # type: ignore[arg-type]
    assert err.value.message.startswith(words), err.value.message
    assert "--slurm-tasks per-node" in str(err.value.hint)


def test_a_config_files_value_is_named_by_its_line(script: str) -> None:
    request = LaunchRequest(script=script, max_restarts=2,
                            origin={"max_restarts": "distrun.yaml:4"})
    with pytest.raises(LaunchError, match=r"^distrun.yaml:4: max_restarts 2: one rank"):
        resolve(request, environ=STEP)


@pytest.mark.parametrize("nproc", ["1", "2", "auto"])
def test_values_that_agree_with_the_step_are_taken(nproc: str, script: str,
                                                   tmp_path: Path) -> None:
    spec = resolve(LaunchRequest(script=script, nproc_per_node=nproc, nnodes="2",
                                 master_port=23456, log_dir=str(tmp_path / "logs")),
                   environ=STEP)
    assert spec.nproc_per_node == 1 and spec.master_port == 23456
    assert "(port given)" in spec.notes[0]
    assert spec.log_dir == str(tmp_path / "logs" / "rank3")  # tasks may share the folder


@pytest.mark.parametrize(("text", "counts"), [
    ("2(x2)", [2, 2]), ("4", [4]), ("3(x2),1", [3, 3, 1]), ("2,1,1", [2, 1, 1]), ("x", []),
])
def test_tasks_per_node(text: str, counts: list[int]) -> None:
    assert slurm_tasks.tasks_per_node(text) == counts


def test_derived_port_is_the_jobs_own() -> None:
    ports = {slurm_tasks.derived_port(str(job)) for job in range(1000, 1100)}
    assert len(ports) == 100 and all(20000 <= p < 29000 for p in ports)
    assert slurm_tasks.derived_port("1234567") == slurm_tasks.derived_port("1234567")


def test_a_task_given_one_gpu_is_warned_about_gpu_local_rank(script: str) -> None:
    spec = resolve(LaunchRequest(script=script),
                   environ={**STEP, "CUDA_VISIBLE_DEVICES": "3"})
    assert any("sees 1 GPU(s) (CUDA_VISIBLE_DEVICES=3)" in n and "--gpus-per-node" in n
               for n in spec.notes)
    spec = resolve(LaunchRequest(script=script), environ={**STEP, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert not any("GPU" in n for n in spec.notes)


def test_only_rank_0_checks_the_master_port(script: str) -> None:
    """Rank 0's process group listens on the port: the other tasks of its node must not
    find it taken (they start after it, or before)."""
    one_node = {**STEP, "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "drn1",
                "SLURM_STEP_TASKS_PER_NODE": "4", "SLURM_NODEID": "0"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        spec = resolve(LaunchRequest(script=script, master_port=port), environ=one_node)
        assert spec.task is not None and spec.task.rank == 3
        with pytest.raises(LaunchError, match="already in use"):
            resolve(LaunchRequest(script=script, master_port=port),
                    environ={**one_node, "SLURM_PROCID": "0", "SLURM_LOCALID": "0"})


@pytest.mark.e2e
def test_a_tasks_rank_failing_is_named_with_its_global_rank(tmp_path: Path) -> None:
    """A real distrun as task 3 of 4: its rank's lines tagged [rank 3], its failure named
    by its global and local rank (the other tasks are other distruns: each names its own)."""
    (tmp_path / "job.py").write_text(
        "import os, sys\nprint('starting', os.environ['RANK'], os.environ['LOCAL_RANK'])\n"
        "sys.exit(f\"rank {os.environ['RANK']} stops on purpose\")\n")
    run = distrun("launch", "--no-check", "--rank-prefix", "--timeout", "60", "job.py",
                  cwd=tmp_path, env={**STEP, "SLURM_STEP_NODELIST": "localhost"})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[rank 3] starting 3 1\n" in run.stdout
    assert "distrun: from the SLURM job 5, one rank per task" in run.stderr
    assert f"  rank 3 (local rank 1) on {socket.gethostname()}: exit code 1 [first failure]" \
        in run.stderr, run.stderr
    assert "rank 3 stops on purpose" in run.stderr
    assert "  logs of this rank: " in run.stderr


def test_a_task_whose_rank_lost_its_peer_is_not_the_first_failure(script: str,
                                                                  tmp_path: Path) -> None:
    """A rank that failed because another task's rank went away is a casualty: its
    distrun, which sees that rank alone, must not call it the first failure."""
    from distrun.cli.render_launch import launch_report
    from distrun.launch.runner import RunResult, _explain_failure

    spec = resolve(LaunchRequest(script=script, log_dir=str(tmp_path / "logs")), environ=STEP)
    assert spec.log_dir is not None
    folder = Path(spec.log_dir, "slurm-task", "attempt_0", "1")
    folder.mkdir(parents=True)
    (folder / "stderr.log").write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
        "RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.1]:4242\n")
    (folder / "exit.json").write_text('{"rank": 3, "local_rank": 1, "host": "drn2", '
                                      '"exit_code": 1, "time": 1.0, "stopped": false}\n')
    result = RunResult(1, "failed", log_dir=spec.log_dir)
    _explain_failure(result, [], spec)
    assert [(f.rank, f.local_rank, f.cause) for f in result.failures] == [(3, 1, "lost peer")]
    report = launch_report(result, spec)
    assert "rank 3 (local rank 1) on drn2: exit code 1 [lost peer]" in report
    assert "it may be another SLURM task" in report
