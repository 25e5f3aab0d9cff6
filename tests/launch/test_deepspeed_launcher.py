"""`distrun launch --launcher deepspeed`: DeepSpeed's own per-node launcher, supervised
like the others. Real processes: a world forms, a failing rank is named with its error,
a silent job is stopped by the hang detector, Ctrl-C stops everything, and nothing is
left behind. What the launcher refuses is said before anything starts."""

from __future__ import annotations

import base64
import json
import re
import signal
from pathlib import Path

import pytest

from distrun.launch.backends import deepspeed as backend
from distrun.launch.spec import LaunchSpec
from tests.conftest import distrun, leftovers
from tests.jobs import Job
from tests.launch.test_run import ALL_REDUCE, FAILING, HANGING, world_lines, write

pytest.importorskip("deepspeed")


def test_command_describes_the_world_to_deepspeeds_launcher() -> None:
    spec = LaunchSpec(script="train.py", script_args=("--lr", "0.1"), nproc_per_node=4,
                      min_nodes=2, max_nodes=2, node_rank=1, master_addr="10.0.0.1",
                      master_port=29555, launcher="deepspeed", log_dir="/tmp/logs")
    argv = backend.build(spec).argv
    info = next(a for a in argv if a.startswith("--world_info="))
    world = json.loads(base64.urlsafe_b64decode(info.split("=", 1)[1]))
    assert world == {"node0": [0, 1, 2, 3], "node1": [0, 1, 2, 3]}
    assert argv[argv.index("--module") + 1] == "distrun.launch.rankrun"
    assert {"--node_rank=1", "--master_addr=10.0.0.1", "--master_port=29555",
            "--no_local_rank", "--log-dir=/tmp/logs"} <= set(argv)
    assert argv[-4:] == ["--", "train.py", "--lr", "0.1"]


@pytest.mark.parametrize(("flags", "says"), [
    (["--rdzv-endpoint", "127.0.0.1:29400"], "the deepspeed launcher has no rendezvous"),
    (["--max-restarts", "2"], "the deepspeed launcher restarts nothing"),
])
def test_what_deepspeeds_launcher_cannot_do_is_refused_before_starting(
        tmp_path: Path, flags: list[str], says: str) -> None:
    script = write(tmp_path, "allreduce.py", ALL_REDUCE)
    result = distrun("launch", "--launcher", "deepspeed", "--nproc-per-node", "2", *flags,
                     script)
    assert result.returncode == 2 and says in result.stderr, result.stderr


@pytest.mark.e2e
def test_two_processes_form_one_world(tmp_path: Path) -> None:
    script = write(tmp_path, "allreduce.py", ALL_REDUCE)
    result = distrun("launch", "--launcher", "deepspeed", "--nproc-per-node", "2", script,
                     "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    assert [line.split(" mp")[0] for line in world_lines(result.stdout)] == [
        "rank 0 world 2 sum 3 args ['--lr', '0.1']", "rank 1 world 2 sum 3 args ['--lr', '0.1']"]
    assert "[default" not in result.stdout + result.stderr
    assert "launch.py" not in result.stderr  # the launcher's own log lines stay out


@pytest.mark.e2e
def test_a_failing_rank_is_named_with_its_error(tmp_path: Path) -> None:
    script = write(tmp_path, "failing.py", FAILING)
    result = distrun("launch", "--launcher", "deepspeed", "--nproc-per-node", "2", script,
                     env={"HOW": "raise"}, timeout=180)
    assert result.returncode == 1
    report = result.stderr[result.stderr.index("distrun: error: the job failed"):]
    lines = report.splitlines()
    assert lines[1].startswith("  rank 1 (local rank 1) on ") and "exit code 1" in lines[1]
    assert "[first failure]" in lines[1]
    assert "| ValueError: boom on purpose in rank 1" in report
    # rank 0 was stopped by the launcher, or lost its peer first: never "failed on its own"
    assert re.search(r"rank 0 \(local rank 0\) on .*\[(also stopped|lost peer)\]", report), report
    assert leftovers(tmp_path) == []


@pytest.mark.e2e
def test_sigint_ends_every_process(tmp_path: Path) -> None:
    script = write(tmp_path, "hanging.py", HANGING)
    job = Job(tmp_path, "--launcher", "deepspeed", "--nproc-per-node", "2", script)
    job.wait_for(r"^rank 0 started")
    job.wait_for(r"^rank 1 started")
    job.proc.send_signal(signal.SIGINT)
    code, err, _ = job.finish(timeout=60)
    assert code == 130, err
    assert "job stopped by SIGINT" in err
    assert leftovers(tmp_path) == []


@pytest.mark.e2e
def test_hang_detector_stops_a_silent_job(tmp_path: Path) -> None:
    script = write(tmp_path, "hanging.py", HANGING)
    result = distrun("launch", "--launcher", "deepspeed", "--nproc-per-node", "2",
                     "--timeout", "4", script)
    assert result.returncode == 124, result.stderr
    assert "no output from any rank for 4 s" in result.stderr
    assert leftovers(tmp_path) == []


def test_a_rank_that_only_lost_its_peer_is_not_the_first_failure(tmp_path: Path) -> None:
    """On a loaded machine the wrapper of the rank that waited in a collective can record
    its end before the wrapper of the rank that raised: the lost peer still comes second."""
    from distrun.launch.failures import exit_records

    errors = {0: "Traceback (most recent call last):\nRuntimeError: [../gloo/transport/tcp/"
                 "pair.cc:534] Connection closed by peer [127.0.0.1]:4242",
              1: "Traceback (most recent call last):\nValueError: boom on purpose in rank 1"}
    for local, error in errors.items():
        folder = tmp_path / "deepspeed" / "attempt_0" / str(local)
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text(error + "\n")
        (folder / "exit.json").write_text(json.dumps({
            "rank": local, "local_rank": local, "host": "h", "exit_code": 1,
            "time": 100.0 + local}))  # rank 0's wrapper recorded first
    failures = exit_records(str(tmp_path))
    assert [(f.rank, f.root_cause) for f in failures] == [(1, True), (0, False)]
