"""`distrun launch --launcher ray`: the ranks as Ray Train workers.

Fast parts first: the driver's command, what the launcher refuses before anything
starts, what happens without Ray, how one rank's script runs and tags its output (in a
process of its own, without Ray), and how the driver sorts what Ray prints. Then two
real jobs on a local Ray cluster (CPU, 2 workers; a Ray start takes most of a minute on
a loaded 2-core machine, so there are only two): a converted script trains to the same
weights as under torchrun, checked to its end; a failing rank is named with its error.
After each, no process of the cluster is left.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from distrun.errors import LaunchError
from distrun.launch.backends import build
from distrun.launch.backends import ray as backend
from distrun.launch.ray_output import RayOutput
from distrun.launch.ray_worker import END_OF_OUTPUT
from distrun.launch.resolve import resolve
from distrun.launch.spec import LaunchRequest, LaunchSpec
from tests.conftest import ROOT, distrun, run_cmd
from tests.launch.test_run import write

EXAMPLE = ROOT / "examples" / "mnist_like.py"
MARKER = "DISTRUN_RAY_TEST"  # set for distrun; every process of its Ray cluster inherits it


def test_the_command_runs_the_driver_with_every_rank_of_the_job() -> None:
    spec = LaunchSpec(script="train.py", script_args=("--lr", "0.1"), nproc_per_node=2,
                      min_nodes=3, max_nodes=3, launcher="ray", log_dir="/tmp/logs",
                      ray_address="ray://head:10001", env=(("FOO", "1"),))
    command = build(spec)
    assert command.argv[1:] == ["-u", "-m", "distrun.launch.ray_driver", "--workers=6",
                                "--address=ray://head:10001", "--log-dir=/tmp/logs", "--",
                                "train.py", "--lr", "0.1"]
    assert spec.ranks_here == 6
    assert {"FOO", "PYTHONUNBUFFERED"} <= set(command.env["DISTRUN_RAY_ENV"].split(","))
    assert command.env["RAY_DEDUP_LOGS"] == "0"  # every rank's line, even when alike
    assert "--address" not in " ".join(backend.build(LaunchSpec(
        script="t.py", launcher="ray")).argv)  # a local cluster


@pytest.mark.parametrize(("flags", "says"), [
    (["--address", "auto"], "--address auto: a Ray cluster's address, for --launcher ray"),
    (["--launcher", "ray", "--master-port", "29511"], "--master-port does not apply to "
                                                      "--launcher ray"),
    (["--launcher", "ray", "--rdzv-endpoint", "10.0.0.1"], "there is no rendezvous"),
    (["--launcher", "ray", "--nnodes", "1:2"], "runs a fixed number of workers"),
])
def test_what_does_not_apply_is_refused_before_starting(tmp_path: Path, flags: list[str],
                                                        says: str) -> None:
    script = write(tmp_path, "train.py", "print('hello')\n")
    result = distrun("launch", "--nproc-per-node", "2", *flags, script)
    assert result.returncode == 2 and says in result.stderr, result.stderr


def test_without_ray_the_error_says_how_to_install_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    script = write(tmp_path, "train.py", "print('hello')\n")
    with pytest.raises(LaunchError) as err:
        resolve(LaunchRequest(script=script, launcher="ray"), environ={})
    assert err.value.exit_code == 2 and "Ray is not installed" in err.value.message
    assert err.value.hint is not None and "pip install 'distrun[ray]'" in err.value.hint


def test_ray_address_from_the_environment_is_the_cluster_joined(tmp_path: Path) -> None:
    script = write(tmp_path, "train.py", "print('hello')\n")
    spec = resolve(LaunchRequest(script=script, launcher="ray", nnodes="2"),
                   environ={"RAY_ADDRESS": "10.0.0.5:6379", "SLURM_JOB_ID": "1",
                            "SLURM_NNODES": "4", "SLURM_NODEID": "3"})
    assert spec.ray_address == "10.0.0.5:6379" and spec.max_nodes == 2  # not SLURM's 4
    assert "Ray cluster at 10.0.0.5:6379 (RAY_ADDRESS)" in spec.notes


ONE_RANK = """\
import os, sys
from distrun.launch.ray_worker import RankFailed, run_rank
os.environ["RANK"] = "3"
try:
    run_rank({"target": sys.argv[1:], "env": {"FROM_DRIVER": "yes"}, "omp": "2",
              "cwd": os.getcwd()})
except RankFailed as failed:
    print(f"failed {failed.rank} {failed.exit_code} {failed.error.splitlines()[-1]}",
          file=sys.__stderr__)
"""

SCRIPT = """\
import os, sys
print("out", sys.argv[1:], os.environ["FROM_DRIVER"], os.environ["OMP_NUM_THREADS"],
      __name__, flush=True)
os.write(2, b"from C code\\n")
if sys.argv[1:] == ["fail"]:
    raise ValueError("boom")
"""


@pytest.mark.parametrize("args", [["ok"], ["fail"]])
def test_a_rank_runs_the_script_with_its_output_tagged(tmp_path: Path, args: list[str]) -> None:
    write(tmp_path, "script.py", SCRIPT)
    result = run_cmd([sys.executable, "-c", ONE_RANK, "script.py", *args], cwd=tmp_path,
                     env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    code = 1 if args == ["fail"] else 0
    assert result.stdout.splitlines() == [
        f"[default3]:out {args!r} yes 2 __main__",
        f"[default3]:{END_OF_OUTPUT} {code} on {socket.gethostname()}"]
    err = result.stderr.splitlines()
    assert "[default3]:from C code" in err
    if args == ["fail"]:
        # the script's traceback, as Python prints it, from its own frame on
        assert err[err.index("[default3]:Traceback (most recent call last):") + 1].startswith(
            f'[default3]:  File "{tmp_path / "script.py"}", line 6')
        assert "[default3]:ValueError: boom" in err and "failed 3 1 ValueError: boom" in err


def test_the_driver_shows_the_ranks_lines_and_keeps_rays_own(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    output = RayOutput(str(tmp_path), out, err)
    output.line("(RayTrainWorker pid=7, ip=10.0.0.2) [default1]:loss 0.5", False)
    output.line("(RayTrainWorker pid=7) [default1]:Traceback (most recent call last):", True)
    output.line("(TrainController pid=5) Requesting resources: {'CPU': 1} * 2", False)
    output.line("(TrainController pid=5) - (ip=10.0.0.3, pid=8) world_rank=2, local_rank=0, "
                "node_rank=1", False)
    output.line(f"[default1]:{END_OF_OUTPUT} 1 on node-b", True)
    assert output.wait_ends({1}, 0.1) == {1}  # its standard output has not ended yet
    output.line(f"(RayTrainWorker pid=7) [default1]:{END_OF_OUTPUT} 1 on node-b", False)
    assert output.wait_ends({1}, 0.1) == set() and output.exit_of(1) == (1, "node-b")
    assert output.host(2, "?") == "10.0.0.3" and output.host(0, "?") == "?"
    output.record_exit(1, "node-b", 1, error="ValueError: boom")
    output.close()
    assert out.getvalue() == "[default1]:loss 0.5\n"
    assert err.getvalue() == "[default1]:Traceback (most recent call last):\n"
    folder = tmp_path / "ray" / "attempt_0" / "1"
    assert (folder / "stderr.log").read_text() == "Traceback (most recent call last):\n"
    assert json.loads((folder / "exit.json").read_text())["exit_code"] == 1
    assert "Requesting resources" in (tmp_path / "ray" / "ray.log").read_text()


# ----------------------------------------------------------------- on a local Ray cluster


def ray_processes(marker: str) -> list[str]:
    """Command lines of live processes whose environment holds MARKER=marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{MARKER}={marker}".encode() in environ:
            found.append(cmdline)
    return found


def assert_no_ray_process_left(marker: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while (left := ray_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], left


@pytest.mark.e2e
def test_a_converted_script_trains_as_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("ray.train")
    torch = pytest.importorskip("torch")
    script = tmp_path / "mnist_like.py"
    script.write_text(EXAMPLE.read_text())
    assert distrun("convert", str(script)).returncode == 0
    converted = str(tmp_path / "mnist_like_ddp.py")
    args = ["--nproc-per-node", "2", converted, "--epochs", "1"]
    torchrun = subprocess.Popen(  # both at once: the Ray start is the long part
        [sys.executable, "-m", "distrun", "launch", "--no-check", *args, "--save-model",
         str(tmp_path / "torchrun.pt")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=tmp_path)
    result = distrun("launch", "--launcher", "ray", "--check", "--rank-prefix", *args,
                     "--save-model", "ray.pt", cwd=tmp_path, env={MARKER: str(tmp_path)},
                     timeout=600)
    assert torchrun.wait(timeout=300) == 0, torchrun.communicate()[1]
    assert result.returncode == 0, result.stderr
    assert "[rank 0] Train Epoch: 1 [0/1024]" in result.stdout  # relative path: its folder
    assert "distrun: check: 8 optimizer steps on 2 ranks, no problem found" in result.stderr
    assert "2 ranks (Ray Train workers)" in result.stderr
    ours, theirs = (torch.load(tmp_path / name) for name in ("ray.pt", "torchrun.pt"))
    assert ours.keys() == theirs.keys()
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=1e-6)
    assert_no_ray_process_left(str(tmp_path))


FAILING = """\
import os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()} ready", flush=True)
if dist.get_rank() == 1:
    raise ValueError("boom on purpose in rank 1")
dist.all_reduce(torch.ones(1))   # rank 0 waits here for a rank that is gone
time.sleep(600)
"""


@pytest.mark.e2e
def test_a_failing_rank_is_named_with_its_error(tmp_path: Path) -> None:
    pytest.importorskip("ray.train")
    script = write(tmp_path, "failing.py", FAILING)
    result = distrun("launch", "--launcher", "ray", "--no-check", "--rank-prefix",
                     "--nproc-per-node", "2", script, env={MARKER: str(tmp_path)},
                     timeout=600)
    assert result.returncode == 1, result.stderr
    assert "[rank 1] rank 1 of 2 ready" in result.stdout
    report = result.stderr[result.stderr.index("distrun: error: the job failed"):]
    lines = report.splitlines()
    assert lines[1].startswith("  rank 1 (local rank 1) on ") and "exit code 1" in lines[1]
    assert "[first failure]" in lines[1]
    assert f'|   File "{script}", line 8, in <module>' in report
    assert "| ValueError: boom on purpose in rank 1" in report
    assert "rank 0 (local rank 0) on " in report and "[ended early]" not in report
    assert_no_ray_process_left(str(tmp_path))


def test_once_a_rank_has_printed_a_busy_launcher_is_not_progress() -> None:
    """Ray's workers have no LOCAL_RANK in their environment when they start, and Ray's
    own processes (raylet, gcs_server) use the CPU for as long as the cluster runs: the
    hang detector counts the silence of the ranks once one of them has printed."""
    from distrun.launch.progress import Progress

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        progress = Progress(busy.pid)
        deadline = time.monotonic() + 60
        while len(progress.cpu) < 2:  # the launcher's CPU sampled: it is busy
            progress.idle()
            time.sleep(0.1)
        progress.output(0)
        while progress.idle() < 3.0:  # the launcher's CPU no longer resets it
            assert time.monotonic() < deadline, "the busy launcher still counts as progress"
            time.sleep(0.1)
    finally:
        busy.kill()
        busy.wait()


def test_a_hang_report_finds_the_script_in_the_thread_that_runs_it(tmp_path: Path) -> None:
    """faulthandler's stacks of a Ray worker: its main thread is Ray's, the script runs
    in the training thread; the report shows the script's frames, from that thread."""
    from distrun.check.waits import _main_frames

    ours = str(ROOT)  # distrun's own files
    script = str(tmp_path / "train.py")
    stacks = (f'Thread 0x00007f65462bd6c0 (most recent call first):\n'
              f'  File "{script}", line 3 in wait_for_batch\n'
              f'  File "{script}", line 9 in <module>\n'
              f'  File "{ours}/distrun/launch/ray_worker.py", line 139 in _run\n\n'
              f'Current thread 0x00007f65470a3b80 (most recent call first):\n'
              f'  File "{sysconfig.get_paths()["stdlib"]}/threading.py", line 1119 in join\n')
    assert [(f.line, f.function) for f in _main_frames(stacks)] == [
        (3, "wait_for_batch"), (9, "<module>")]


def test_the_driver_without_ray_train_says_how_to_install_it(tmp_path: Path) -> None:
    """Ray installed without Ray Train's libraries (`pip install ray`): the driver's
    import fails, and it says so on its real standard error (exit 2)."""
    blocked = ("import sys; sys.modules['ray'] = None\n"
               "from distrun.launch.ray_driver import main\n"
               "sys.exit(main(sys.argv[1:]))\n")
    result = run_cmd([sys.executable, "-c", blocked, "--workers=2", "--", "train.py"],
                     cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert "distrun: ray: Ray Train cannot be imported here" in result.stderr
    assert "pip install 'distrun[ray]'" in result.stderr
