"""A hung job says where each rank waits (issue 28): the classic hangs of tests/launch/
hangs/ on 2 processes with gloo. With --timeout the report names each rank's line, its
last collective and a diagnosis before the job is stopped; without it, a job quiet for
--hang-report-after seconds gets the same report once and goes on; `[collective-mismatch]`
is named as soon as the ranks wait in different collectives; a rank that is slow but
computing is not reported."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import distrun

pytestmark = pytest.mark.e2e
HANGS = Path(__file__).parent / "hangs"


def test_a_collective_on_rank_0_only_is_named_with_both_ranks_lines(tmp_path: Path) -> None:
    shutil.copy(HANGS / "rank0_collective.py", tmp_path / "train.py")
    result = distrun("launch", "--nproc-per-node", "2", "--timeout", "6", "train.py",
                     cwd=tmp_path, timeout=240)
    assert result.returncode == 124, result.stderr[-3000:]
    err = result.stderr
    assert "distrun: check: [collective-mismatch] " in err  # before the timeout's report
    assert err.index("[collective-mismatch]") < err.index("the job made no progress")
    assert ("rank 0: last collective: all_reduce #1, shape [1] float32 at train.py:13: "
            "waiting in it") in err
    assert "    train.py:13, in evaluate\n    train.py:28, in main" in err
    assert "rank 1: last collective: barrier #1 at train.py:29: waiting in it" in err
    assert ("diagnosis: rank 0 is in all_reduce #1 (train.py:13) while rank 1 is in barrier "
            "#1 (train.py:29) with another collective") in err
    # PyTorch's Flight Recorder (gloo's, here), dumped on demand while the ranks wait: its
    # sequence counts DDP's own collectives too; the dumps are kept with the logs
    recorded = re.findall(r"flight recorder's last: (\w+) #(\d+)(, sizes \S+ \w+)?: (.*) \(", err)
    assert [(op, state) for op, _, _, state in recorded] == [
        ("all_reduce", "not completed"), ("barrier", "not completed")], err
    kept = re.search(r"Flight Recorder dumps are kept in (\S+) ", err)
    assert kept is not None, err
    assert sorted(p.name for p in Path(kept[1]).iterdir()) == ["trace_rank_0", "trace_rank_1"]


def test_uneven_batches_say_which_rank_never_joins(tmp_path: Path) -> None:
    shutil.copy(HANGS / "uneven_batches.py", tmp_path / "train.py")
    result = distrun("launch", "--nproc-per-node", "2", "--timeout", "6", "train.py",
                     cwd=tmp_path, timeout=240)
    assert result.returncode == 124, result.stderr[-3000:]
    assert ("diagnosis: rank 0 waits in barrier #1 (train.py:23) while rank 1 is in no "
            "collective (its last: #0) at train.py:20, in main: rank 1 never calls it") in (
        result.stderr)


def test_without_timeout_a_quiet_job_is_reported_once_and_left_running(
        tmp_path: Path) -> None:
    shutil.copy(HANGS / "rank0_collective.py", tmp_path / "train.py")
    job = subprocess.Popen([sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2",
                            "--hang-report-after", "5", "train.py"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert job.stderr is not None
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = job.stderr.readline()
        seen.append(line)
        if line.startswith("  diagnosis: "):
            break
    assert job.poll() is None, "".join(seen)  # still running: a report, not a stop
    job.send_signal(signal.SIGTERM)
    _, rest = job.communicate(timeout=60)
    said = "".join(seen) + rest
    assert said.count("distrun: warning: no output from any rank for 5 s (still waiting") == 1
    assert "rank 0: last collective: all_reduce #1" in said
    assert job.returncode == 143


def test_a_slow_rank_that_computes_is_not_a_hang(tmp_path: Path) -> None:
    shutil.copy(HANGS / "slow_evaluation.py", tmp_path / "train.py")
    result = distrun("launch", "--nproc-per-node", "2", "--hang-report-after", "4", "train.py",
                     cwd=tmp_path, env={"EVAL_SECONDS": "9"}, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    # Not a hang: nothing is stopped. On an idle machine nothing is said either; on a
    # loaded one a rank may not answer the stack probe in time, and the quiet spell is
    # then said, as a warning that stops nothing (seen under a concurrent test load).
    if "no output from any rank" in result.stderr:
        assert "a slow step is not a hang: nothing is stopped" in result.stderr, \
            result.stderr[-3000:]
    assert "it was stopped" not in result.stderr, result.stderr[-3000:]
    assert "rank 0 done" in result.stdout and "rank 1 done" in result.stdout


def test_a_quiet_job_that_ends_cleanly_keeps_the_dumps_its_report_named(
        tmp_path: Path) -> None:
    """The report of a quiet job says its Flight Recorder dumps are kept: they still are
    after a clean end, when distrun removes the temporary log folder of the job."""
    shutil.copy(HANGS / "quiet_then_done.py", tmp_path / "train.py")
    result = distrun("launch", "--nproc-per-node", "2", "--check", "--hang-report-after", "3",
                     "train.py", cwd=tmp_path, env={"QUIET_SECONDS": "10"}, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    named = re.search(r"flight recorder dumps: (\S+) \(kept;", result.stderr)
    kept = re.search(r"Flight Recorder dumps are kept in (\S+) ", result.stderr)
    assert named is not None and kept is not None, result.stderr[-3000:]
    assert named[1] == kept[1]
    assert sorted(p.name for p in Path(kept[1]).iterdir()) == ["trace_rank_0", "trace_rank_1"]
    shutil.rmtree(kept[1])


def test_a_barrier_on_rank_0_only_names_both_collectives(tmp_path: Path) -> None:
    shutil.copy(HANGS / "barrier_on_rank0.py", tmp_path / "train.py")
    result = distrun("launch", "--nproc-per-node", "2", "--timeout", "6", "train.py",
                     cwd=tmp_path, timeout=240)
    assert result.returncode == 124, result.stderr[-3000:]
    assert "rank 0: last collective: barrier #1 at train.py:14: waiting in it" in result.stderr
    assert ("rank 1: last collective: all_reduce #1, shape [4] float32 at train.py:16: "
            "waiting in it") in result.stderr
    assert "[collective-mismatch]" in result.stderr
