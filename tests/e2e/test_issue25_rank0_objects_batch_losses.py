"""Issue 25, classes 12 and 14, end to end on 2 CPU processes.

Class 12: a SummaryWriter made on rank 0 only whose folder the project reads elsewhere
(`os.path.join(self.writer.logdir, "model.pt")`, a log file beside the events, a helper
of another module calling `writer.get_logdir()`), `if self.writer:`, `with
SummaryWriter(...) as w:`, a tqdm bar with `set_description`/`update`/`tqdm.write`. Before,
the writer was `None` on rank 1 (AttributeError at `self.writer.logdir`). The writer here
(a stand-in for tensorboardX on PYTHONPATH) names its default folder with the process id,
so two ranks that each picked their own would make two folders: one folder must be made,
rank 0's, holding one events file, the checkpoint and the whole log.

Class 14: SimCLR's NT-Xent plus a Barlow Twins term, whose negatives and statistics are
the whole batch. The conversion gathers the batches of the loss's training call; the
2-process run (16 per rank) must equal the 1-process run (32) to 1e-5. Without the
gather it does not (checked in-process below: the loss of two halves gives another
gradient than the loss of the whole).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import distrun, run_cmd

pytestmark = pytest.mark.e2e

FAKE_TENSORBOARDX = textwrap.dedent('''\
    """tensorboardX's SummaryWriter, as far as the test needs: its default folder is the
    process's own (the real one's is the clock's and the host's)."""
    import os
    import time


    class SummaryWriter:
        def __init__(self, logdir=None, comment="", **kwargs):
            if logdir is None:
                logdir = os.path.join("runs", f"{time.time_ns()}_{os.getpid()}{comment}")
            self.logdir = logdir
            os.makedirs(logdir, exist_ok=True)
            self._events = open(os.path.join(logdir, f"events.{os.getpid()}"), "a")

        def get_logdir(self):
            return self.logdir

        def add_scalar(self, tag, value, step=None):
            self._events.write(f"{tag} {step} {float(value)}\\n")

        def close(self):
            self._events.close()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()
    ''')

UTILS = textwrap.dedent('''\
    import os


    def log_metrics(writer, loss, step):
        writer.add_scalar("loss", loss, step)
        return os.path.join(writer.get_logdir(), "last_step.txt")
    ''')

TRAIN = textwrap.dedent('''\
    import logging
    import os

    import torch
    import torch.nn as nn
    from tensorboardX import SummaryWriter
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm import tqdm

    from utils import log_metrics

    logger = logging.getLogger("train")


    class Trainer:
        def __init__(self, model):
            self.model = model
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            self.writer = SummaryWriter(comment="_mlp")
            self.ckpt_path = os.path.join(self.writer.logdir, "model.pt")
            handler = logging.FileHandler(os.path.join(self.writer.get_logdir(), "train.log"),
                                          mode="w")
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)

        def fit(self, loader, epochs):
            bar = tqdm(total=epochs * len(loader))
            step = 0
            for epoch in range(epochs):
                for x, y in loader:
                    loss = nn.functional.mse_loss(self.model(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    bar.set_description(f"epoch {epoch}")
                    bar.update(1)
                    step += 1
                    if self.writer:
                        self.writer.add_scalar("train/loss", loss.item(), step)
                path = log_metrics(self.writer, loss.item(), step)
                tqdm.write(f"epoch {epoch} done, see {path}")
                logger.info("epoch %d loss %.4f", epoch, loss.item())
            bar.close()
            torch.save(self.model.state_dict(), self.ckpt_path)
            with SummaryWriter(os.path.join(self.writer.logdir, "final")) as final:
                final.add_scalar("final/loss", loss.item(), step)


    if __name__ == "__main__":
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        loader = DataLoader(data, batch_size=int(os.environ["BATCH_SIZE"]))
        Trainer(nn.Linear(4, 1)).fit(loader, 2)
    ''')


def test_a_writer_made_on_rank_0_answers_every_use_on_the_others(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tensorboardX.py").write_text(FAKE_TENSORBOARDX)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "utils.py").write_text(UTILS)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"),
                                          os.environ.get("PYTHONPATH", "")])}
    converted = distrun("convert", "train.py", cwd=project)  # before the run: the copy
    assert converted.returncode == 0, converted.stdout + converted.stderr  # has no runs/
    single = run_cmd([sys.executable, "train.py"], cwd=project, env={**env, "BATCH_SIZE": "8"})
    assert single.returncode == 0, single.stderr
    for rule in ("output.rank0_object", "output.rank0_folder", "output.log_file"):
        assert rule in converted.stdout, rule
    two = distrun("launch", "--nproc-per-node", "2", "--check", "train.py",
                  cwd=tmp_path / "proj_ddp", env={**env, "BATCH_SIZE": "4"})
    assert two.returncode == 0, two.stdout + two.stderr
    assert two.stdout.count("epoch 1 done") == 1, two.stdout  # tqdm.write on rank 0 only
    folders = list((tmp_path / "proj_ddp" / "runs").iterdir())
    assert len(folders) == 1, folders  # rank 0's, which rank 1 was told
    folder = folders[0]
    assert len(list(folder.glob("events.*"))) == 1
    assert len(list((folder / "final").glob("events.*"))) == 1
    log = (folder / "train.log").read_text()
    assert log.count("epoch 0 loss") == 1 and log.count("epoch 1 loss") == 1, log
    expected = torch.load(next((project / "runs").iterdir()) / "model.pt")
    got = torch.load(folder / "model.pt")
    for key, value in expected.items():
        assert torch.allclose(value, got[key], atol=1e-5), key


SIMCLR = textwrap.dedent('''\
    import os

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset


    def nt_xent(z1, z2, temperature=0.5):
        """Each view's positive is the other view of its sample; every other view of the
        batch is a negative."""
        z = F.normalize(torch.cat([z1, z2]), dim=1)
        n = z1.shape[0]
        sim = z @ z.T / temperature
        sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
        targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        return F.cross_entropy(sim, targets)


    def barlow_twins(z1, z2, lambd=5e-3):
        n = z1.shape[0]
        z1 = (z1 - z1.mean(0)) / z1.std(0)
        z2 = (z2 - z2.mean(0)) / z2.std(0)
        c = z1.T @ z2 / n
        off = c - torch.diag(torch.diagonal(c))
        return (torch.diagonal(c) - 1).pow(2).sum() + lambd * off.pow(2).sum()


    def main():
        torch.manual_seed(0)
        x = torch.randn(64, 8)
        views = TensorDataset(x + 0.1 * torch.randn(64, 8), x + 0.1 * torch.randn(64, 8))
        loader = DataLoader(views, batch_size=int(os.environ["BATCH_SIZE"]))
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for epoch in range(3):
            for x1, x2 in loader:
                z1, z2 = model(x1), model(x2)
                loss = nt_xent(z1, z2) + 0.01 * barlow_twins(z1, z2)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch}: loss {loss.item():.6f}")
        torch.save(model.state_dict(), os.environ["OUT_PATH"])


    if __name__ == "__main__":
        main()
    ''')


def test_a_simclr_loss_on_2_processes_equals_the_single_process_run(tmp_path: Path) -> None:
    (tmp_path / "simclr.py").write_text(SIMCLR)
    single = run_cmd([sys.executable, "simclr.py"], cwd=tmp_path,
                     env={"BATCH_SIZE": "32", "OUT_PATH": "single.pt"})
    assert single.returncode == 0, single.stderr
    converted = distrun("convert", "simclr.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert converted.stdout.count("batch_loss.gather") == 2, converted.stdout
    assert "distrun" not in "".join(
        line for line in (tmp_path / "simclr_ddp.py").read_text().splitlines()
        if line.startswith(("import", "from")))
    two = distrun("launch", "--nproc-per-node", "2", "--check", "simclr_ddp.py", cwd=tmp_path,
                  env={"BATCH_SIZE": "16", "OUT_PATH": "two.pt"})
    assert two.returncode == 0, two.stdout + two.stderr
    losses = [[float(line.split()[-1]) for line in out.splitlines() if line.startswith("epoch")]
              for out in (single.stdout, two.stdout)]
    assert len(losses[0]) == len(losses[1]) == 3, two.stdout  # printed by rank 0 only
    assert all(abs(a - b) < 1e-5 for a, b in zip(*losses, strict=True)), losses
    expected, got = torch.load(tmp_path / "single.pt"), torch.load(tmp_path / "two.pt")
    for key, value in expected.items():
        assert torch.allclose(value, got[key], atol=1e-5), key


def test_the_loss_of_two_halves_is_not_the_loss_of_the_batch(tmp_path: Path) -> None:
    """What the test above would see without the gather: each rank's loss over its half
    gives another gradient (DDP averages them) than the loss over the whole batch."""
    (tmp_path / "simclr.py").write_text(SIMCLR)
    spec = importlib.util.spec_from_file_location("simclr_for_test", tmp_path / "simclr.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    x1, x2 = torch.randn(32, 8), torch.randn(32, 8)

    def gradient(*halves: slice) -> torch.Tensor:
        model.zero_grad()
        for half in halves:
            z1, z2 = model(x1[half]), model(x2[half])
            loss = module.nt_xent(z1, z2) + 0.01 * module.barlow_twins(z1, z2)
            (loss / len(halves)).backward()
        assert model.weight.grad is not None
        return model.weight.grad.clone()

    whole = gradient(slice(0, 32))
    per_rank = gradient(slice(0, 16), slice(16, 32))
    assert (whole - per_rank).abs().max() > 1e-3
