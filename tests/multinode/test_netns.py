"""Two hosts on one machine: network namespaces joined by a veth pair, each with its own
address on a private test subnet that exists only inside them. The hostname still
resolves to loopback there, the classic multi-node trap: `distrun launch` must pick the
interface that reaches the master by itself (these tests set no *_SOCKET_IFNAME)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def _launch_on(namespaces: list[str], per_node: list[list[str]], script: Path
               ) -> list[subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "distrun",
                               "launch", "--timeout", "60", *args, str(script)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for ns, args in zip(namespaces, per_node, strict=True)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=150)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


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


def test_c10d_rendezvous_across_hosts(two_hosts: tuple[str, str, str],
                                      tmp_path: Path) -> None:
    a, b, master = two_hosts
    script = tmp_path / "job.py"
    script.write_text(JOB)
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", f"{master}:29612",
              "--rdzv-id", "netns-test"]
    results = _launch_on([a, b], [common, common], script)
    assert _world(results) == ["rank 0 world 2 sum 3", "rank 1 world 2 sum 3"]
    # torchrun would tell node b to meet node 0 at its hostname (loopback): distrun gives
    # each node its own address on the route to the endpoint.
    assert f"this node's address for the other nodes: {master}" in results[0].stderr
    assert "this node hosts the c10d rendezvous" in results[0].stderr
