"""Two hosts on one machine: network namespaces joined by a veth pair, each with its own
address on a private test subnet that exists only inside them. The hostname still
resolves to loopback there, the classic multi-node trap: `distrun launch` must pick the
interface that reaches the master by itself (these tests set no *_SOCKET_IFNAME)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SUBNET = "10.213.{}.{}"
JOB = """\
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)]); dist.all_reduce(t)
sys.stdout.write(f"rank {dist.get_rank()} world {dist.get_world_size()} sum {t.item():g}\\n")
dist.destroy_process_group()
"""

# Steps of all-reduce until STEPS (argv[1]); rank 0 reports every 10th step.
TRAIN = """\
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
sys.stdout.write(f"start rank {rank} world {world} restart {restart}\\n")
for step in range(int(sys.argv[1])):
    t = torch.ones(1); dist.all_reduce(t)
    if rank == 0 and step % 10 == 0:
        sys.stdout.write(f"step {step} world {int(t.item())}\\n")
    time.sleep(0.05)
sys.stdout.write(f"done rank {rank} world {world}\\n")
dist.destroy_process_group()
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str, str]]:
    """Namespaces (a, b) and a's address; b reaches a over a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (ip netns) to make network namespaces")
    tag = f"dr{os.getpid() % 100000}"
    a, b = f"{tag}a", f"{tag}b"
    net = str(os.getpid() % 200 + 20)
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", f"{tag}x", "type", "veth", "peer", "name", f"{tag}y")
        _ip("link", "set", f"{tag}x", "netns", a)
        _ip("link", "set", f"{tag}y", "netns", b)
        _ip("-n", a, "addr", "add", SUBNET.format(net, 1) + "/24", "dev", f"{tag}x")
        _ip("-n", b, "addr", "add", SUBNET.format(net, 2) + "/24", "dev", f"{tag}y")
        for ns, dev in ((a, f"{tag}x"), (b, f"{tag}y")):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as err:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {err.stderr.decode().strip()}")
    try:
        yield a, b, SUBNET.format(net, 1)
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}


def _start(ns: str, args: list[str], script: Path, timeout: int = 60, steps: int | None = None
           ) -> subprocess.Popen[str]:
    """`distrun launch` as one node, inside namespace `ns`."""
    extra = [] if steps is None else [str(steps)]
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "distrun",
                             "launch", "--timeout", str(timeout), *args, str(script), *extra],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _launch_on(namespaces: list[str], per_node: list[list[str]], script: Path,
               timeout: int = 60) -> list[subprocess.CompletedProcess[str]]:
    procs = [_start(ns, args, script, timeout)
             for ns, args in zip(namespaces, per_node, strict=True)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=150)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def _wait_for_line(proc: subprocess.Popen[str], prefix: str, limit: float = 60) -> str:
    """Read `proc`'s stdout until a line starts with `prefix` (the lines read are lost)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no line starting with {prefix!r} from {proc.args}")


def _alive_in(ns: str) -> list[str]:
    """Processes running inside namespace `ns` now."""
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True
                          ).stdout.split()


def _left_in(ns: str, limit: float = 30) -> list[str]:
    """Processes still in namespace `ns` once they had `limit` seconds to go (an event:
    returns as soon as there is none)."""
    deadline = time.monotonic() + limit
    while (alive := _alive_in(ns)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _world(results: list[subprocess.CompletedProcess[str]]) -> list[str]:
    for result in results:
        assert result.returncode == 0, result.stdout + result.stderr
    return sorted(line for r in results for line in r.stdout.splitlines()
                  if line.startswith("rank "))


def test_static_rendezvous_across_hosts(two_hosts: tuple[str, str, str],
                                        tmp_path: Path) -> None:
    a, b, master = two_hosts
    script = tmp_path / "job.py"
    script.write_text(JOB)
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", master,
              "--master-port", "29611"]
    results = _launch_on([a, b], [[*common, "--node-rank", "0"],
                                  [*common, "--node-rank", "1"]], script)
    assert _world(results) == ["rank 0 world 2 sum 3", "rank 1 world 2 sum 3"]
    assert "GLOO_SOCKET_IFNAME=" in results[1].stderr  # chosen, and said


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_c10d_rendezvous_across_hosts(two_hosts: tuple[str, str, str],
                                      tmp_path: Path, launcher: str) -> None:
    a, b, master = two_hosts
    script = tmp_path / "job.py"
    script.write_text(JOB)
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", f"{master}:29612",
              "--rdzv-id", "netns-test", "--launcher", launcher]
    results = _launch_on([a, b], [common, common], script)
    assert _world(results) == ["rank 0 world 2 sum 3", "rank 1 world 2 sum 3"]
    # torchrun would tell node b to meet node 0 at its hostname (loopback): distrun gives
    # each node its own address on the route to the endpoint.
    assert f"this node's address for the other nodes: {master}" in results[0].stderr
    assert "this node hosts the c10d rendezvous" in results[0].stderr


def test_unreachable_master_is_refused_before_anything_starts(two_hosts: tuple[str, str, str],
                                                             tmp_path: Path) -> None:
    _, b, _ = two_hosts
    script = tmp_path / "job.py"
    script.write_text(JOB)
    (result,) = _launch_on([b], [["--nnodes", "2", "--node-rank", "1",
                                  "--master-addr", "10.214.0.1"]], script)
    assert result.returncode == 2, result.stderr
    assert "no route from this node to 10.214.0.1" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("how", ["static", "c10d"])
def test_wrong_master_address_fails_within_the_timeout(two_hosts: tuple[str, str, str],
                                                       tmp_path: Path, how: str) -> None:
    """Node b was given a wrong address for node 0, where nobody answers: torchrun would
    retry for 15 minutes (its retry warnings are not progress). Both nodes stop at
    --timeout, each saying it did not meet the other."""
    a, b, master = two_hosts
    wrong = master.rpartition(".")[0] + ".9"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    if how == "static":
        right = ["--node-rank", "0", "--master-addr", master, "--master-port", "29613"]
        where = ["--node-rank", "1", "--master-addr", wrong, "--master-port", "29613"]
    else:
        right = ["--rdzv-endpoint", f"{master}:29613"]
        where = ["--rdzv-endpoint", f"{wrong}:29613"]
    results = _launch_on([a, b], [["--nnodes", "2", *right], ["--nnodes", "2", *where]],
                         script, timeout=6)  # both end: torchrun alone would retry 15 min
    for result, addr in zip(results, (master, wrong), strict=True):
        assert result.returncode == 124, result.stderr
        assert "did not meet the other nodes within 6 s" in result.stderr
        assert f"check that {addr} is node 0's address" in result.stderr
        assert "frame #" not in result.stderr  # c10d's C++ stack dumps are not shown


def test_a_lost_node_ends_the_job_on_the_others_and_is_named(two_hosts: tuple[str, str, str],
                                                             tmp_path: Path) -> None:
    """Node b (all its processes) is killed mid-run: node a ends within seconds, and its
    report says the peer at b's address went away."""
    a, b, master = two_hosts
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", master,
              "--master-port", "29614"]
    procs = [_start(ns, [*common, "--node-rank", str(rank)], script, steps=100000)
             for rank, ns in enumerate((a, b))]
    _wait_for_line(procs[0], "step ", limit=180)
    for pid in subprocess.run(["ip", "netns", "pids", b], capture_output=True, text=True,
                              check=True).stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    out, err = procs[0].communicate(timeout=120)  # ends: it does not wait for node b
    procs[1].communicate(timeout=60)
    assert procs[0].returncode == 1, out + err
    b_address = master.rpartition(".")[0] + ".2"
    assert f"lost peer: the process at {b_address}" in err
    assert "another node" in err
    assert not _left_in(a), "node a left processes behind"


def test_elastic_job_goes_on_without_a_lost_node_and_takes_it_back(
        two_hosts: tuple[str, str, str], tmp_path: Path) -> None:
    """--nnodes 1:2 --max-restarts 3: node b (every process in it) is killed mid-run; node a
    restarts its worker in a world of 1; node b is started again, joins, and both finish in
    a world of 2. (torchrun alone blocks the new node for ever at the next round,
    pytorch#147064: distrun turns off its shared rendezvous store, and says so.)"""
    a, b, master = two_hosts
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    common = ["--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "3",
              "--rdzv-endpoint", f"{master}:29615", "--rdzv-id", "elastic-test",
              "--rdzv-conf", "last_call_timeout=1"]
    node_a = _start(a, common, script, timeout=120, steps=400)
    node_b = _start(b, common, script, timeout=120, steps=400)
    _wait_for_line(node_a, "step 10 world 2", limit=180)
    for pid in _alive_in(b):
        os.kill(int(pid), signal.SIGKILL)
    node_b.communicate(timeout=60)
    _wait_for_line(node_a, "step 10 world 1", limit=180)  # went on alone
    node_b = _start(b, common, script, timeout=120, steps=400)
    out_a, err_a = node_a.communicate(timeout=300)
    out_b, err_b = node_b.communicate(timeout=120)
    assert node_a.returncode == 0, out_a + err_a
    assert node_b.returncode == 0, out_b + err_b
    assert "done rank 0 world 2" in out_a and "done rank 1 world 2" in out_b, out_a + out_b
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in err_a


def _doctor_in(ns: str, address: str, port: int) -> tuple[int, dict[str, dict[str, str]]]:
    result = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-m", "distrun",
                             "doctor", "--json", "--no-smoke", "--nnodes", "2",
                             "--master-addr", address, "--master-port", str(port)],
                            env=_env(), capture_output=True, text=True, timeout=60)
    return result.returncode, {c["name"]: c for c in json.loads(result.stdout)}


def test_doctor_on_a_node_reports_whether_the_master_port_is_reachable(
        two_hosts: tuple[str, str, str]) -> None:
    a, b, master = two_hosts
    listener = subprocess.Popen(
        ["ip", "netns", "exec", a, sys.executable, "-c",
         "import socket, sys, time\n"
         f"s = socket.create_server(('{master}', 29616))\n"
         "sys.stdout.write('listening\\n'); sys.stdout.flush(); time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_line(listener, "listening")
        code, checks = _doctor_in(b, master, 29616)
        assert checks["master port"]["status"] == "ok", checks["master port"]
        assert checks["interface"]["detail"].endswith(f"leaves through {b[:-1]}y"), checks
        hostname = checks["hostname"]
        assert hostname["status"] == "warn" and f"GLOO_SOCKET_IFNAME={b[:-1]}y" in hostname["hint"]
    finally:
        listener.kill()
        listener.wait()
    code, checks = _doctor_in(b, master, 29616)  # node 0 not started yet: a warning
    assert checks["master port"]["status"] == "warn" and "refused" in checks["master port"][
        "detail"]
    wrong = master.rpartition(".")[0] + ".9"
    code, checks = _doctor_in(b, wrong, 29616)  # nobody at that address: a failure
    assert code == 1
    assert checks["master port"]["status"] == "fail", checks["master port"]
    assert "not reachable" in checks["master port"]["detail"]
