"""`--max-restarts` really restarts (issue 27): a rank that fails once is restarted and
the job finishes, on one node and on two (two `distrun launch` on 127.0.0.1); the report
names the first failure of the failed attempt and the done line says "after 1 restart".

torchrun's static rendezvous does not survive a restart (the restarted workers read the
first attempt's gloo addresses: "connectFullMesh failed ... Connection refused", 1 run in
3 here before the fix), so distrun makes a c10d rendezvous of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distrun.netinfo import free_port
from tests.conftest import distrun

pytestmark = pytest.mark.e2e

FLAKY = """\
import gc, os
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    if step == 1 and rank == 1 and not os.path.exists("failed_once"):
        open("failed_once", "w").close()
        raise RuntimeError("rank 1 fails once")
print(f"rank {rank} done after restart {os.environ['TORCHELASTIC_RESTART_COUNT']}")
del model
gc.collect()
dist.destroy_process_group()
"""
FIRST = "attempt 0 failed, first at local rank {}: RuntimeError: rank 1 fails once; restarted"


def test_one_node_restarts_the_failed_group_and_finishes(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FLAKY)
    result = distrun("launch", "--nproc-per-node", "2", "--max-restarts", "1", "train.py",
                     cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "c10d rendezvous at 127.0.0.1:" in result.stderr
    assert f"distrun: {FIRST.format(1)}" in result.stderr
    assert "exit code 0, after 1 restart" in result.stderr
    assert sorted(result.stdout.split("\n")[-3:-1]) == [
        "rank 0 done after restart 1", "rank 1 done after restart 1"]


def test_two_nodes_with_a_static_address_restart_and_finish(tmp_path: Path) -> None:
    """The README's config shape: two nodes, node 0's address, max_restarts 1."""
    (tmp_path / "train.py").write_text(FLAKY)
    port = str(free_port())

    def node(rank: int) -> list[str]:
        return [sys.executable, "-m", "distrun", "launch", "--nnodes", "2", "--node-rank",
                str(rank), "--master-addr", "127.0.0.1", "--master-port", port,
                "--nproc-per-node", "1", "--max-restarts", "1", "train.py"]

    nodes = [subprocess.Popen(node(rank), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    said = [n.communicate(timeout=300) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], [e[-2000:] for _, e in said]
    errs = said[0][1] + said[1][1]
    assert errs.count(f"c10d rendezvous at 127.0.0.1:{port}") == 2
    assert f"distrun: {FIRST.format(0)}" in errs  # rank 1 is the local rank 0 of its node
    assert "after 1 restart" in errs
    # the failed node restarted its group (count 1); node 0's group was restarted as a
    # new rendezvous round, which torch does not count as one of node 0's restarts
    done = sorted(out.strip().splitlines()[-1] for out, _ in said)
    assert done[0].startswith("rank 0 done after restart "), done
    assert done[1] == "rank 1 done after restart 1", done
