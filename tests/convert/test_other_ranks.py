"""What the ranks but 0 hold in place of rank 0's output objects: the stand-in the
converted script defines, and what the output transform leaves alone."""

from __future__ import annotations

import copy
import textwrap

from distrun.convert import convert_source
from distrun.convert.names import Names
from distrun.convert.other_ranks import helper_code

TRAINING = """
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(0)  # data drawn alike on every rank
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""


def converted(extra: str) -> str:
    return convert_source(textwrap.dedent(TRAINING) + textwrap.dedent(extra), "t.py").output


def stand_in(folder: bool, rank: int) -> type:
    import torch.distributed as dist

    space: dict[str, object] = {"dist": dist, "RANK": rank}
    exec(helper_code(Names(), folder), space)  # noqa: S102 - the converter's own code
    made = space["Rank0Only"]
    assert isinstance(made, type)
    return made


def test_the_stand_in_answers_every_use() -> None:
    standin = stand_in(False, 1)()
    assert standin.add_scalar("loss", 1.0, 3) is standin
    assert standin.file_writer.event_writer.flush() is standin
    assert bool(standin) and standin is not None
    with standin as inside:
        inside.add_text("a", "b")
    assert copy.deepcopy(standin) is not standin
    assert not hasattr(standin, "__fspath__")  # not a path: os.path.join fails loudly


def test_the_stand_in_with_a_folder_reads_rank_0s() -> None:
    full = stand_in(True, 1)
    standin = full("runs/exp1")
    assert standin.log_dir == standin.logdir == standin.get_logdir() == "runs/exp1"
    assert isinstance(full.shared(None), full)  # no process group: no folder to receive

    class Writer:
        log_dir = "runs/Jan01_host"

    writer = Writer()
    assert stand_in(True, 0).shared(writer) is writer  # rank 0 keeps its own


def test_a_writer_whose_folder_is_never_read_sends_nothing() -> None:
    out = converted('writer = SummaryWriter("runs")\nwriter.add_scalar("x", 1.0)\n')
    assert 'writer = SummaryWriter("runs") if RANK == 0 else Rank0Only()' in out
    assert "broadcast_object_list" not in out and "def shared" not in out


def test_log_files_and_bars_left_alone() -> None:
    out = converted("""
    handler = logging.StreamHandler()
    quiet = logging.FileHandler("a.log", delay=True)
    from tqdm import tqdm
    bar = tqdm(range(3))
    bar.set_description("x")
    """)
    assert "handler = logging.StreamHandler()\n" in out
    assert 'logging.FileHandler("a.log", delay=True or RANK != 0)' in out
    assert 'bar.set_description("x")\n' in out and "if RANK == 0:\n    bar.set_description" \
        not in out
