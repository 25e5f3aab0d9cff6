"""`distrun launch` as a user meets it: errors that name what the user wrote (the config's
key, or the flag), `-- ARGS` for a config's script, the order of what is said, the line
that ends a run, whose output is shown, how failed ranks are labelled, start-up against
--timeout, and a node waiting for the others. Real processes (CPU, gloo)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from distrun.cli import render
from distrun.launch.runner import RunResult
from distrun.launch.spec import LaunchSpec
from distrun.netinfo import free_port
from tests.conftest import distrun, leftovers

ARGS = "import sys\nprint('args', sys.argv[1:], flush=True)\n"

WHO = """\
import os, sys
print(f"hello from {os.environ['RANK']}", flush=True)
print(f"stderr of {os.environ['RANK']}", file=sys.stderr, flush=True)
"""

# Rank 0 writes half a line and waits while torchrun copies that half (it reads its workers'
# logs every 0.1 s) and rank 1 prints a whole line; then it ends its own.
HALF_LINE = """\
import os, sys, time
from pathlib import Path
here = Path(sys.argv[1])
if os.environ["RANK"] == "0":
    sys.stdout.write("half")
    sys.stdout.flush()
    (here / "half").touch()
    while not (here / "other").exists():
        time.sleep(0.01)
    time.sleep(0.5)
    print(" and the rest", flush=True)
else:
    while not (here / "half").exists():
        time.sleep(0.01)
    time.sleep(0.5)
    print("line of rank 1", flush=True)
    (here / "other").touch()
"""

# Both ranks fail on their own, at the same moment (each waits for the other's file first).
# The one torchrun stops first (it stops the others as soon as one fails, and a loaded
# machine can delay a rank past that) raises its own error from the SIGTERM too: it still
# fails on its own, with its traceback and exit code 1.
BOTH_FAIL = """\
import os, signal, sys, time
from pathlib import Path
rank = int(os.environ["RANK"])
here = Path(sys.argv[1])
def own_error(*_):
    raise ValueError(f"own error on rank {rank}")
signal.signal(signal.SIGTERM, own_error)
(here / f"ready{rank}").touch()
while not all((here / f"ready{r}").exists() for r in (0, 1)):
    time.sleep(0.01)
own_error()
"""

# A DDP model with a layer built and never called: DDP's error at the second step.
UNUSED_LAYER = """\
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 1)
        self.spare = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.used(x)
model = DDP(Net())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
"""

# Silent, and using no CPU, for longer than --timeout before its first line: start-up
# (a data set read over the network, imports from a cold disk), not a hang.
SLOW_SILENT_START = """\
import time
time.sleep(7)
print("up", flush=True)
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name


def test_a_missing_master_address_names_the_config_key_and_line(tmp_path: Path) -> None:
    write(tmp_path, "t.py", ARGS)
    (tmp_path / "job.yaml").write_text("script: t.py\nnnodes: 2\n")
    result = distrun("launch", "--config", "job.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "job.yaml:2: nnodes is 2: a multi-node job needs the address of node 0" in \
        result.stderr
    assert "`master_addr: HOST` in job.yaml" in result.stderr
    flags = distrun("launch", "--nnodes", "2", "t.py", cwd=tmp_path)  # typed: named as flags
    assert flags.returncode == 2 and "add --master-addr HOST" in flags.stderr
    assert "job.yaml" not in flags.stderr


@pytest.mark.e2e
def test_args_after_dash_dash_go_to_the_configs_script_and_the_run_ends_with_a_line(
        tmp_path: Path) -> None:
    write(tmp_path, "t.py", ARGS)
    (tmp_path / "job.yaml").write_text("script: t.py\nscript_args: ['--lr', '1']\n")
    result = distrun("launch", "--config", "job.yaml", "--", "--epochs", "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "args ['--epochs', '5']" in result.stdout  # they replace the file's script_args
    last = result.stderr.rstrip().splitlines()[-1]
    assert re.fullmatch(r"distrun: done: 1 rank, \d+\.\d s, exit code 0", last), last


def test_script_args_without_dash_dash_after_a_config_say_where_they_go(
        tmp_path: Path) -> None:
    write(tmp_path, "t.py", ARGS)
    (tmp_path / "job.yaml").write_text("script: t.py\n")
    option = distrun("launch", "--config", "job.yaml", "--epochs", "5", cwd=tmp_path)
    assert option.returncode == 2
    assert "no such option: --epochs" in option.stderr
    assert "distrun launch --config job.yaml -- --epochs 5" in option.stderr
    words = distrun("launch", "--config", "job.yaml", "3", "1", cwd=tmp_path)
    assert words.returncode == 2 and "3: no such file" in words.stderr
    assert "job.yaml names the script (t.py)" in words.stderr
    assert "distrun launch --config job.yaml -- 3 1" in words.stderr
    typo = distrun("launch", "--config", "job.yaml", "--nnodez", "2", cwd=tmp_path)
    assert typo.returncode == 2 and "Did you mean" in typo.stderr  # distrun's own, mistyped


def test_a_bad_log_dir_is_said_before_anything_else(tmp_path: Path) -> None:
    write(tmp_path, "t.py", ARGS)
    (tmp_path / "afile").write_text("")
    result = distrun("launch", "--log-dir", "afile/logs", "t.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("distrun: error: --log-dir afile/logs: cannot create it")
    assert "master port" not in result.stderr


@pytest.mark.e2e
def test_ranks_filter_and_rank_prefix(tmp_path: Path) -> None:
    write(tmp_path, "who.py", WHO)
    result = distrun("launch", "--nproc-per-node", "3", "--ranks", "0,2", "--rank-prefix",
                     "who.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[rank 0] hello from 0",
                                                  "[rank 2] hello from 2"]
    assert "[rank 2] stderr of 2" in result.stderr
    assert "of 1" not in result.stdout + result.stderr
    assert "3 ranks" in result.stderr.splitlines()[-1]


@pytest.mark.e2e
def test_a_line_torchrun_copies_in_pieces_is_shown_whole(tmp_path: Path) -> None:
    """torchrun tags each piece it copies ("[default0]:half[default1]:line of rank 1" then
    "[default0]: and the rest"): distrun shows each rank's line whole, untagged."""
    write(tmp_path, "half.py", HALF_LINE)
    result = distrun("launch", "--nproc-per-node", "2", "half.py", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["half and the rest", "line of rank 1"]


def test_ranks_that_do_not_exist_are_refused_before_the_start(tmp_path: Path) -> None:
    write(tmp_path, "who.py", WHO)
    result = distrun("launch", "--nproc-per-node", "2", "--ranks", "3", "who.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "local rank 3 does not exist here" in result.stderr
    bad = distrun("launch", "--ranks", "one", "who.py", cwd=tmp_path)
    assert bad.returncode == 2 and "expected local ranks" in bad.stderr


@pytest.mark.e2e
def test_a_rank_that_failed_on_its_own_is_not_said_to_be_stopped(tmp_path: Path) -> None:
    write(tmp_path, "both.py", BOTH_FAIL)
    result = distrun("launch", "--nproc-per-node", "2", "both.py", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    report = result.stderr[result.stderr.index("distrun: error: the job failed"):]
    assert report.count("[first failure]") == 1, report
    # Its own error, or its own error and then the launcher's SIGTERM while it was
    # still exiting (Python gives back the default SIGTERM action as it shuts down).
    other = re.search(r"^  rank (\d) \(local rank \d\) on \S+: (exit code 1|its own error, "
                      r"then killed by SIGTERM while it exited) \[also failed\]$", report, re.M)
    assert other, report
    assert f"| ValueError: own error on rank {other[1]}" in report
    assert "also stopped" not in report
    assert leftovers(tmp_path) == []


def test_a_rank_killed_while_exiting_from_its_own_error_is_said_to_have_failed() -> None:
    from distrun.launch.failures import Failure

    spec = LaunchSpec(script="t.py", nproc_per_node=3)
    own = "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: mine"
    result = RunResult(1, "failed", failures=[
        Failure(1, 1, "h", 1, root_cause=True, error=own.replace("mine", "first")),
        Failure(0, 0, "h", -15, error=own),
        Failure(2, 2, "h", -15, error="Traceback (most recent call last):\nKeyboardInterrupt"),
    ])
    text = render.launch_report(result, spec)
    assert ("rank 0 (local rank 0) on h: its own error, then killed by SIGTERM while it "
            "exited [also failed]") in text, text
    assert "    | ValueError: mine" in text
    assert "rank 2 (local rank 2) on h: killed by SIGTERM [also stopped]" in text, text


def test_a_gradient_marked_ready_twice_gets_the_reentrant_checkpoint_hint() -> None:
    """DDP's error under find_unused_parameters=True with reentrant activation
    checkpointing (the conversion avoids it since; a hand-written script may not)."""
    from distrun.launch.failures import Failure

    spec = LaunchSpec(script="t.py", nproc_per_node=2)
    error = ("Traceback (most recent call last):\n  File \"t.py\", line 9\nRuntimeError: "
             "Expected to mark a variable ready only once. This error is caused by ...")
    result = RunResult(1, "failed", failures=[
        Failure(0, 0, "h", 1, root_cause=True, error=error)])
    text = render.launch_report(result, spec)
    assert "hint: a parameter's gradient arrived twice in one backward" in text, text
    assert "use_reentrant=False" in text and "static_graph=True" in text, text
    plain = RunResult(1, "failed", failures=[
        Failure(0, 0, "h", 1, root_cause=True, error="RuntimeError: other")])
    assert "arrived twice" not in render.launch_report(plain, spec)


@pytest.mark.e2e
def test_parameters_without_gradients_get_the_find_unused_parameters_hint(
        tmp_path: Path) -> None:
    write(tmp_path, "unused.py", UNUSED_LAYER)
    result = distrun("launch", "--nproc-per-node", "2", "unused.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "hint: some parameters got no gradient in a step (parameters 2 3 of the model" \
        in result.stderr, result.stderr
    assert "find_unused_parameters=True" in result.stderr


@pytest.mark.e2e
def test_start_up_silence_within_the_grace_is_not_a_hang(tmp_path: Path) -> None:
    write(tmp_path, "slow.py", SLOW_SILENT_START)
    result = distrun("launch", "--nproc-per-node", "1", "--timeout", "3", "slow.py",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "up" in result.stdout.splitlines()


def test_a_hang_before_any_output_does_not_blame_collectives() -> None:
    spec = LaunchSpec(script="t.py", nproc_per_node=2, timeout=5.0)
    quiet = RunResult(124, "hung", detail="no output from any rank for 5 s", any_output=False)
    text = render.launch_report(quiet, spec)
    assert "no rank had printed a line yet: the job was still starting" in text
    assert "collective" not in text
    spoke = RunResult(124, "hung", detail="no output from any rank for 5 s", any_output=True)
    assert "collective" in render.launch_report(spoke, spec)


@pytest.mark.e2e
def test_a_node_waiting_for_the_others_says_so(tmp_path: Path) -> None:
    write(tmp_path, "t.py", ARGS)
    port = free_port()
    result = distrun("launch", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                     "127.0.0.1", "--master-port", str(port), "--timeout", "9", "t.py",
                     cwd=tmp_path, timeout=180)
    assert result.returncode == 124, result.stderr
    assert re.search(rf"^distrun: waiting for the other nodes at 127\.0\.0\.1:{port} "
                     r"\(\d+ s; 2 nodes in all\)", result.stderr, re.M), result.stderr
    assert "did not meet the other nodes" in result.stderr
    assert leftovers(tmp_path) == []


@pytest.mark.e2e
def test_nodes_meeting_at_a_c10d_rendezvous_say_how_many_have_joined(tmp_path: Path) -> None:
    """Two of three nodes at a c10d rendezvous: a node's waiting line says 2 of 3 have
    joined. The test waits for that line (the first comes at 5 s, the next at 15 s), then
    stops both nodes with SIGTERM: nothing is left running. (A node that never meets the
    others stops at its --timeout: test_a_node_waiting_for_the_others_says_so.)"""
    write(tmp_path, "t.py", ARGS)
    endpoint = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "distrun", "launch", "--nnodes", "3", "--rdzv-endpoint",
               endpoint, "--rdzv-id", "meet", "--timeout", "120", "t.py"]
    joined = re.compile(rf"^distrun: waiting for the other nodes at {re.escape(endpoint)} "
                        r"\(\d+ s; 2 of 3 nodes joined\)", re.M)
    said: list[str] = []
    seen = threading.Event()

    def read(node: subprocess.Popen[str]) -> None:
        assert node.stderr is not None
        for line in node.stderr:
            said.append(line)
            if joined.search(line):
                seen.set()

    nodes = [subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                              stdout=subprocess.DEVNULL) for _ in range(2)]
    readers = [threading.Thread(target=read, args=(node,), daemon=True) for node in nodes]
    for reader in readers:
        reader.start()
    try:
        assert seen.wait(timeout=150), "".join(said)
    finally:
        for node in nodes:  # SIGTERM: distrun ends its job (nothing left running)
            if node.poll() is None:
                node.terminate()
        for node in nodes:
            node.wait(timeout=60)
        for reader in readers:
            reader.join(timeout=10)
    assert leftovers(tmp_path) == [], "".join(said)


@pytest.mark.e2e
def test_a_node_whose_node_0_does_not_answer_says_so(tmp_path: Path) -> None:
    write(tmp_path, "t.py", ARGS)
    port = free_port()
    result = distrun("launch", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                     "127.0.0.1", "--master-port", str(port), "--timeout", "9", "t.py",
                     cwd=tmp_path, timeout=180)
    assert result.returncode == 124, result.stderr
    assert re.search(rf"at 127\.0\.0\.1:{port} \(\d+ s; 2 nodes in all; node 0 does not "
                     r"answer there yet\)", result.stderr), result.stderr


def test_help_documents_the_new_options() -> None:
    result = distrun("launch", "--help")
    for option in ("--ranks", "--rank-prefix", "-- --epochs 5"):
        assert option in result.stdout, option
    assert sys.executable  # (the help is the one `python -m distrun` shows)


def test_the_done_line_of_a_node_of_a_multi_node_job() -> None:
    spec = LaunchSpec(script="t.py", nproc_per_node=4, min_nodes=2, max_nodes=2, node_rank=1)
    done = RunResult(0, "ok", seconds=12.34)
    assert render.done_line(done, spec, 0) == ("distrun: done: 4 ranks on this node (node 1 "
                                               "of 2), 12.3 s, exit code 0")
    assert render.done_line(done, spec, 3).endswith("exit code 3 (--check found a problem)")


def test_mixed_precision_for_a_script_that_cannot_read_it_is_refused(tmp_path: Path) -> None:
    """A DDP script never reads the launch-time precision: it would train in fp32."""
    (tmp_path / "train.py").write_text("import torch\nprint('fp32')\n")
    refused = distrun("launch", "--nproc-per-node", "1", "--mixed-precision", "bf16",
                      "train.py", cwd=tmp_path)
    assert refused.returncode == 2
    assert "does not use accelerate" in refused.stderr and "--amp bf16" in refused.stderr
    (tmp_path / "acc.py").write_text("from accelerate import Accelerator\n")
    dry = distrun("launch", "--dry-run", "--nproc-per-node", "1", "--mixed-precision", "bf16",
                  "acc.py", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
