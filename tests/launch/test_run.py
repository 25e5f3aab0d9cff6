"""distrun launch with real processes (CPU, gloo): worlds form, failures end the job (well
before gloo's own 30-minute timeout) and are named, signals stop everything, nothing is
left behind. The tests wait for events (a line of output, a process exit) with limits
generous enough for a loaded machine, never for a fixed time."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distrun.launch.resolve import free_port
from tests.conftest import distrun, leftovers
from tests.jobs import Job

pytestmark = pytest.mark.e2e

ALL_REDUCE = """\
import os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} world {dist.get_world_size()} sum {total.item():g} "
      f"args {sys.argv[1:]} mp {os.environ.get('DISTRUN_MIXED_PRECISION')}", flush=True)
dist.destroy_process_group()
"""

FAILING = """\
import os, signal, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(0.5)
    if os.environ.get("HOW") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("HOW") == "gpu":  # what torch.cuda.set_device(1) says with one GPU
        raise RuntimeError("CUDA error: invalid device ordinal")
    raise ValueError("boom on purpose in rank 1")
dist.all_reduce(torch.ones(1))   # rank 0 waits here for a rank that is gone
time.sleep(600)
"""

HANGING = """\
import time
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} started", flush=True)
time.sleep(600)
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def world_lines(stdout: str) -> list[str]:
    return sorted(line for line in stdout.splitlines() if line.startswith("rank "))


def test_two_processes_form_one_world(tmp_path: Path) -> None:
    script = write(tmp_path, "allreduce.py", ALL_REDUCE)
    result = distrun("launch", "--nproc-per-node", "2", "--mixed-precision", "bf16", script,
                     "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    assert world_lines(result.stdout) == [
        "rank 0 world 2 sum 3 args ['--lr', '0.1'] mp bf16",
        "rank 1 world 2 sum 3 args ['--lr', '0.1'] mp bf16",
    ]
    assert "[default" not in result.stdout  # launcher tags are stripped


def test_module_mode_runs_like_python_m(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "job.py").write_text(ALL_REDUCE)
    result = distrun("launch", "--nproc-per-node", "2", "-m", "pkg.job", cwd=tmp_path,
                     env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert len(world_lines(result.stdout)) == 2


def _two_nodes(tmp_path: Path, per_node: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    script = write(tmp_path, "allreduce.py", ALL_REDUCE)
    procs = [subprocess.Popen([sys.executable, "-m", "distrun", "launch", *args, script],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in per_node]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def test_two_nodes_static_rendezvous_on_loopback(tmp_path: Path) -> None:
    port = str(free_port())
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
              "--master-port", port]
    results = _two_nodes(tmp_path, [[*common, "--node-rank", "0"], [*common, "--node-rank", "1"]])
    for result in results:
        assert result.returncode == 0, result.stderr
    lines = sorted(line for r in results for line in world_lines(r.stdout))
    assert [line.split(" args")[0] for line in lines] == ["rank 0 world 2 sum 3",
                                                          "rank 1 world 2 sum 3"]


def test_two_nodes_c10d_rendezvous_on_loopback(tmp_path: Path) -> None:
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint",
              f"127.0.0.1:{free_port()}", "--rdzv-id", "test-job"]
    results = _two_nodes(tmp_path, [common, common])
    for result in results:
        assert result.returncode == 0, result.stderr
    lines = sorted(line.split(" args")[0] for r in results for line in world_lines(r.stdout))
    assert lines == ["rank 0 world 2 sum 3", "rank 1 world 2 sum 3"]


@pytest.mark.parametrize(("how", "expected"), [
    ("raise", "exit code 1"), ("kill", "killed by SIGKILL"), ("gpu", "exit code 1"),
])
def test_a_failing_rank_ends_the_job_fast_and_is_named(tmp_path: Path, how: str,
                                                       expected: str) -> None:
    script = write(tmp_path, "failing.py", FAILING)
    result = distrun("launch", "--nproc-per-node", "2", script, env={"HOW": how},
                     timeout=180)  # rank 0 would wait 30 min in gloo if the job went on
    assert result.returncode == 1
    report = result.stderr[result.stderr.index("distrun: error: the job failed"):]
    first = report.splitlines()[1]
    assert first.startswith("  rank 1 (local rank 1) on ") and expected in first
    assert "[first failure]" in first
    if how == "raise":
        assert "| ValueError: boom on purpose in rank 1" in report
    hint = "hint: local rank 1 has no GPU of its own: 2 processes per node but fewer GPUs"
    assert (hint in report) == (how == "gpu"), report
    assert "ChildFailedError" not in result.stderr  # torchrun's own trace is replaced
    assert leftovers(tmp_path) == []


def test_sigint_to_the_launcher_ends_every_process(tmp_path: Path) -> None:
    script = write(tmp_path, "hanging.py", HANGING)
    job = Job(tmp_path, "--nproc-per-node", "2", script)
    job.wait_for(r"^rank 0 started")  # both ranks are up: the whole job is running
    job.wait_for(r"^rank 1 started")
    job.proc.send_signal(signal.SIGINT)
    code, err, _ = job.finish(timeout=60)  # distrun kills what is left after 5 s
    assert code == 130
    assert "job stopped by SIGINT" in err
    assert leftovers(tmp_path) == []


def test_hang_detector_stops_a_silent_job(tmp_path: Path) -> None:
    script = write(tmp_path, "hanging.py", HANGING)
    result = distrun("launch", "--nproc-per-node", "2", "--timeout", "4", script)
    assert result.returncode == 124
    assert "no output from any rank for 4 s" in result.stderr
    assert leftovers(tmp_path) == []


ACCELERATOR = """\
import torch
import torch.distributed as dist
from accelerate import Accelerator

accelerator = Accelerator()  # no cpu=True: on a machine without GPUs, distrun says so
total = torch.tensor([float(accelerator.process_index + 1)])
dist.all_reduce(total)
print(f"rank {accelerator.process_index} world {accelerator.num_processes} sum "
      f"{total.item():g} {accelerator.distributed_type}", flush=True)
dist.destroy_process_group()  # gloo can abort at exit without it (pytorch/pytorch#179291)
"""


def test_accelerate_launcher_runs_the_same_world(tmp_path: Path) -> None:
    """A plain `Accelerator()` forms the world of the launch (on a CPU-only machine it
    would be a world of one per process without ACCELERATE_USE_CPU)."""
    script = write(tmp_path, "accelerated.py", ACCELERATOR)
    result = distrun("launch", "--launcher", "accelerate", "--nproc-per-node", "2",
                     "--mixed-precision", "no", script)
    assert result.returncode == 0, result.stderr
    kind = "MULTI_GPU" if torch_has_cuda() else "MULTI_CPU"
    assert world_lines(result.stdout) == [f"rank 0 world 2 sum 3 DistributedType.{kind}",
                                          f"rank 1 world 2 sum 3 DistributedType.{kind}"]


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_logs_are_kept_where_asked(tmp_path: Path) -> None:
    script = write(tmp_path, "allreduce.py", ALL_REDUCE)
    logs = tmp_path / "logs"
    result = distrun("launch", "--nproc-per-node", "2", "--log-dir", str(logs), script)
    assert result.returncode == 0, result.stderr
    outs = sorted(p.read_text() for p in logs.glob("*/attempt_0/*/stdout.log"))
    assert [o.split(" args")[0] for o in outs] == ["rank 0 world 2 sum 3",
                                                    "rank 1 world 2 sum 3"]
