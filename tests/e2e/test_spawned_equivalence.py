"""A script that starts its own DDP workers with mp.spawn (the users' own pattern), run on
2 processes as its author runs it (`python train.py`, gloo on CPU), against its
conversion launched by `distrun launch --nproc-per-node 2`: the same weights, bit for
bit (issue 25, class 7). Before the conversion, the launch trained nothing: each
launched process spawned a group of `torch.cuda.device_count()` (0) workers, exit 0."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import distrun, run_cmd

pytestmark = pytest.mark.e2e

SPAWNED = textwrap.dedent('''\
    import gc
    import os
    import sys

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler


    def setup(rank, world_size):
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = sys.argv[1]
        dist.init_process_group("gloo", rank=rank, world_size=world_size)


    def main(rank, world_size, epochs, out):
        setup(rank, world_size)
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=True))
        model = DDP(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
        if rank == 0:
            torch.save(model.module.state_dict(), out)
        del model, optimizer
        gc.collect()  # DDP's last all-reduce freed first: gloo can abort a rank at exit
        dist.destroy_process_group()


    if __name__ == "__main__":
        world_size = 2  # torch.cuda.device_count() on the author's machine
        mp.spawn(main, args=(world_size, 3, "spawned.pt"), nprocs=world_size, join=True)
    ''')


def test_a_spawned_script_converted_for_the_launcher_trains_the_same(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SPAWNED)
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    original = run_cmd([sys.executable, str(script), port], cwd=tmp_path)
    assert original.returncode == 0, original.stderr
    converted = distrun("convert", str(script), "-o", str(tmp_path / "train_ddp.py"))
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "spawned.one_worker_per_process" in converted.stdout
    text = (tmp_path / "train_ddp.py").read_text()
    assert "mp.spawn" not in text and 'main(RANK, WORLD_SIZE, 3, "spawned.pt")' in text
    (tmp_path / "spawned_original.pt").write_bytes((tmp_path / "spawned.pt").read_bytes())
    (tmp_path / "spawned.pt").unlink()
    launched = distrun("launch", "--nproc-per-node", "2", "--check", "train_ddp.py", port,
                       cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "no problem found" in launched.stderr
    expected = torch.load(tmp_path / "spawned_original.pt")
    got = torch.load(tmp_path / "spawned.pt")
    assert sorted(expected) == sorted(got)
    for key, value in expected.items():
        assert torch.equal(value, got[key]), key
