"""Issue 25's class "a training DataLoader given its own batch_sampler", end to end.

The script: a bucketing batch sampler of its own (batches of samples of similar
length, the order of the batches and within them drawn from torch's global generator
at each pass), bound to a name, wrapped in an infinite sampler (DomainBed's
`_InfiniteSampler` style: no end of pass, no len()), the loader stepped with `next()`
for a fixed number of steps. The original runs on 1 process, the conversion on 2 gloo
processes under `launch --check`; the final weights must agree to 1e-5.

The batch size: a batch sampler's batch is the global batch. The conversion splits each
of its batches among the ranks, so both runs get BATCH_SIZE=64 (the original's batch);
each rank reads 32 of each (unlike the corpus, where each rank's DataLoader batch_size
is 32 and the sampler shards the data). 96 samples make batches of 64 and 32 (buckets),
both even, so the shares are equal and no index is repeated: the mean of the two ranks'
mean losses is the original's mean loss.

Under the projects' shim with DISTRUN_SHIM_SEED_BY_RANK=1, rank 1 seeds torch
differently from rank 0 (as an unseeded script's ranks do for real): its own batch
sampler draws other batches. The weights agree only because rank 0's batches are the
ones every rank uses; a wrapper that let each rank take its share of its own draw fails
here (rank 1's half then overlaps rank 0's).

The helper's promises for batches that do not divide (padding, fewer indices than
ranks), len() and set_epoch are checked on its generated code in a 2-process gloo world.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distrun.convert.names import Names
from distrun.convert.transforms.batch_samplers import helper_code
from tests.conftest import ROOT, distrun
from tests.e2e.test_corpus_equivalence import (
    assert_weights_close,
    imported_modules,
    run_single,
    run_two,
)

pytestmark = pytest.mark.e2e

SCRIPT = textwrap.dedent('''\
    import os

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    class LengthBuckets:
        """Batches of samples of similar length; the batches' order and each batch's own
        order drawn from torch's global generator at each pass."""

        def __init__(self, lengths, batch_size):
            order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
            self.batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]

        def __iter__(self):
            for b in torch.randperm(len(self.batches)).tolist():
                batch = self.batches[b]
                yield [batch[j] for j in torch.randperm(len(batch)).tolist()]

        def __len__(self):
            return len(self.batches)


    class Forever(torch.utils.data.Sampler):
        """Goes through its batch sampler again and again (no len())."""

        def __init__(self, sampler):
            self.sampler = sampler

        def __iter__(self):
            while True:
                yield from self.sampler


    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(96, 4, generator=gen), torch.randn(96, 1, generator=gen)
    lengths = (x.abs().sum(1) * 10).long().tolist()
    buckets = LengthBuckets(lengths, int(os.environ["BATCH_SIZE"]))
    steps = iter(DataLoader(TensorDataset(x, y), batch_sampler=Forever(buckets)))
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(9):  # 4.5 passes: the last one stops inside a pass
        inputs, targets = next(steps)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    torch.save(model.state_dict(), os.environ["OUT_PATH"])
    ''')


def test_a_bucketing_infinite_batch_sampler_trains_like_the_original(tmp_path: Path) -> None:
    (tmp_path / "buckets.py").write_text(SCRIPT)
    shim = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "projects" / "shim"),
                                            os.environ.get("PYTHONPATH", "")]),
            "DISTRUN_SHIM_SEED_BY_RANK": "1"}
    run_single(tmp_path / "buckets.py", tmp_path, env=shim)
    converted = distrun("convert", "buckets.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "data.share_batch_sampler" in converted.stdout
    assert "set_epoch" not in converted.stdout  # the batches stay the original's draws
    text = (tmp_path / "buckets_ddp.py").read_text()
    assert "batch_sampler=RankShareBatchSampler(Forever(buckets))" in text
    assert not imported_modules(text) & {"distrun"}
    run_two(tmp_path / "buckets_ddp.py", tmp_path, env={**shim, "BATCH_SIZE": "64"})
    assert_weights_close(tmp_path)


SHARES = textwrap.dedent('''\
    import json
    import sys

    import torch
    import torch.distributed as dist

    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method=f"file://{sys.argv[2]}", rank=rank,
                            world_size=2)
    exec(sys.argv[3])


    class Own:
        """Rank 1 draws other batches than rank 0, as an unseeded run's ranks do."""

        epoch = None

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            if rank == 0:
                yield from ([0, 1, 2, 3, 4], [7], torch.tensor([8, 9, 10, 11]))
            else:
                yield from ([50, 51], [52, 53], [54, 55], [56])

        def __len__(self):
            return 3


    own = Own()
    shared = RankShareBatchSampler(own)
    shared.set_epoch(5)
    print(json.dumps({"len": len(shared), "epoch": own.epoch, "batches": list(shared)}))
    dist.destroy_process_group()
    ''')


def test_the_helper_gives_every_rank_an_equal_share_of_rank_0s_batches(tmp_path: Path
                                                                       ) -> None:
    """A batch of 5 on 2 ranks: 3 each, the first index repeated; a batch of 1: both
    ranks get it; a tensor batch is cut like a list; rank 1's own (longer) draw is
    ignored and the pass ends with rank 0's; len() and set_epoch reach the original."""
    (tmp_path / "shares.py").write_text(SHARES)
    code = helper_code(Names())
    procs = [subprocess.Popen([sys.executable, "shares.py", str(rank), str(tmp_path / "store"),
                               code], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    got = [json.loads(out) for out, _ in outs]
    assert [g["batches"] for g in got] == [[[0, 1, 2], [7], [8, 9]],
                                           [[3, 4, 0], [7], [10, 11]]]
    assert all(g["len"] == 3 and g["epoch"] == 5 for g in got)
