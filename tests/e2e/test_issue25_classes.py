"""Issue 25's classes, end to end, on a script of ours in the styles the public projects
showed: a Solver that builds its model lazily (`self.model = None` in `__init__`,
`build_model()` from `run()`) with a loss module beside it (classes 1 and 2), a split
made with an unseeded `np.random.shuffle` (class 5) and handed to the loader as a
`SubsetRandomSampler` (class 4). The original on 1 process (batch 32: the whole training
split, one batch per epoch) against the conversion on 2 processes (16 per rank), under
the projects' shim with DISTRUN_SHIM_SEED_BY_RANK=1: every rank draws its own random
numbers, as a real run of an unseeded script does (rank 0 as the original). Before
issue 25 the conversion crashed on `DDP(None)`; once it did not, each rank would have
trained on its own split."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.batched import Batch, Case, fixture_case
from tests.conftest import ROOT, distrun, run_cmd

pytestmark = pytest.mark.e2e

# The tests whose assertions are convert's report, both runs' exit 0 and the weights:
# proven together, one original process and one launch (tests/batched.py; no `--check`).
# The projects' shim seeds torch when it is first imported: its cases launch their own.
FIXTURES = ROOT / "tests/convert/fixtures"
CLASSES = Batch("issue25_classes", [
    Case("owns", "owns.py", "owns_ddp.py", ("owns.py", "--to", "ddp", "-o", "owns_ddp.py"),
         files={"owns.py": (FIXTURES / "model/module_owns_network.py").read_text()}),
    Case("phases", "phases.py", "phases_ddp.py", ("phases.py",),
         files={"phases.py": (FIXTURES / "data/phase_loaders.py").read_text()},
         single_env={"BATCH_SIZE": "32"}, two_env={"BATCH_SIZE": "16"}),
    fixture_case("stats", "data/statistics_pass.py", "stats"),
])

SOLVER = textwrap.dedent('''\
    import os

    import numpy as np
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset


    class Solver(object):
        def __init__(self, batch_size):
            self.model = None
            self.criterion = None
            self.optimizer = None
            self.batch_size = batch_size

        def build_model(self):
            torch.manual_seed(0)
            self.model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            self.criterion = nn.MSELoss()
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)

        def build_data(self):
            gen = torch.Generator().manual_seed(1)
            data = TensorDataset(torch.randn(40, 4, generator=gen),
                                 torch.randn(40, 1, generator=gen))
            indices = list(range(len(data)))
            np.random.shuffle(indices)
            train_idx, valid_idx = indices[:32], indices[32:]
            self.loader = DataLoader(data, batch_size=self.batch_size,
                                     sampler=SubsetRandomSampler(train_idx))
            self.valid = DataLoader(data, batch_size=8, sampler=SubsetRandomSampler(valid_idx))
            self.train_size = len(self.loader.sampler.indices)  # the sampler's own attribute

        def train(self):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                loss = self.criterion(self.model(x), y)
                loss.backward()
                self.optimizer.step()

        def run(self, epochs):
            self.build_data()
            self.build_model()
            for epoch in range(epochs):
                self.train()
            print(f"trained on {self.train_size} samples")
            torch.save(self.model.state_dict(), os.environ["OUT_PATH"])


    if __name__ == "__main__":
        Solver(int(os.environ["BATCH_SIZE"])).run(4)
    ''')


def test_a_lazy_solver_with_a_sampled_unseeded_split_trains_like_the_original(
        tmp_path: Path) -> None:
    (tmp_path / "solver.py").write_text(SOLVER)
    shim = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "projects" / "shim"),
                                            os.environ.get("PYTHONPATH", "")]),
            "DISTRUN_SHIM_SEED_BY_RANK": "1"}
    single = run_cmd([sys.executable, "solver.py"], cwd=tmp_path,
                     env={**shim, "BATCH_SIZE": "32", "OUT_PATH": "single.pt"})
    assert single.returncode == 0, single.stderr
    converted = distrun("convert", "solver.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    report = converted.stdout
    for rule in ("data.same_split", "data.share_sampler", "model.wrap"):
        assert rule in report, rule
    assert "ddp_criterion" not in (tmp_path / "solver_ddp.py").read_text()
    two = distrun("launch", "--nproc-per-node", "2", "--check", "solver_ddp.py", cwd=tmp_path,
                  env={**shim, "BATCH_SIZE": "16", "OUT_PATH": "two.pt"})
    assert two.returncode == 0, two.stdout + two.stderr
    # the wrapped sampler still answers the original's attributes (`.indices`)
    assert "trained on 32 samples" in two.stdout and "trained on 32 samples" in single.stdout
    expected, got = torch.load(tmp_path / "single.pt"), torch.load(tmp_path / "two.pt")
    assert sorted(expected) == sorted(got)
    for key, value in expected.items():
        assert torch.allclose(value, got[key], atol=1e-5), key


GENERATED = textwrap.dedent('''\
    import os
    import random

    import torch
    import torch.nn as nn


    def batches(x, y, size):
        order = list(range(len(x)))
        random.shuffle(order)  # unseeded: each rank would shuffle its own way
        for start in range(0, len(order), size):
            pick = order[start:start + size]
            yield x[pick], y[pick]


    torch.manual_seed(0)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(4):
        for inputs, targets in batches(x, y, int(os.environ["BATCH_SIZE"])):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
    torch.save(model.state_dict(), os.environ["OUT_PATH"])
    ''')


ITERATOR_OBJECT = (ROOT / "tests/convert/fixtures/data/batch_iterator_instance.py").read_text()


@pytest.mark.parametrize(("source", "per_rank"), [
    (GENERATED, "16"), (ITERATOR_OBJECT, "16"), (GENERATED, "32")],
    ids=["generator", "iterator_object", "one_batch_padded"])
def test_batches_made_by_hand_are_shared_out_like_a_sampler(tmp_path: Path, source: str,
                                                          per_rank: str) -> None:
    """Class 4: batches made by a generator of the script with its own unseeded shuffle,
    or by an iterating class whose instance a factory returns and a Trainer keeps (the
    loop reads `self.batches`). Rank 0 makes the batches, each rank trains on one of
    every two: the same steps as the original. With one batch per epoch (32 on 2 ranks)
    the short round is padded: both ranks train on it, the original's step (a dropped
    round would train nothing)."""
    (tmp_path / "gen.py").write_text(source)
    shim = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "projects" / "shim"),
                                            os.environ.get("PYTHONPATH", "")]),
            "DISTRUN_SHIM_SEED_BY_RANK": "1"}
    single = run_cmd([sys.executable, "gen.py"], cwd=tmp_path,
                     env={**shim, "BATCH_SIZE": "32", "OUT_PATH": "single.pt"})
    assert single.returncode == 0, single.stderr
    converted = distrun("convert", "gen.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "data.rank_batches" in converted.stdout
    two = distrun("launch", "--nproc-per-node", "2", "--check", "gen_ddp.py", cwd=tmp_path,
                  env={**shim, "BATCH_SIZE": per_rank, "OUT_PATH": "two.pt"})
    assert two.returncode == 0, two.stdout + two.stderr
    expected, got = torch.load(tmp_path / "single.pt"), torch.load(tmp_path / "two.pt")
    for key, value in expected.items():
        assert torch.allclose(value, got[key], atol=1e-5), key


def test_a_cache_written_when_missing_is_made_once_and_read_by_every_rank(
        tmp_path: Path) -> None:
    """`if not os.path.isfile(p): make; np.save(p, made)`, `pickle.dump(vocab, open(p,
    "wb"))` under `if not os.path.exists(p)`, and `if exists(p): return load(p)` followed
    by the making (json through Path.write_text, a torch.save of random numbers): rank 0
    makes each file first, the others wait and read it. `launch --check` sees every file
    each rank writes: a file written by two ranks is a finding (exit 3); a barrier that
    pairs with nothing hangs (the launch's timeout)."""
    fixture = ROOT / "tests/convert/fixtures/checkpoint/cache_written_when_missing.py"
    (tmp_path / "cache.py").write_text(fixture.read_text())
    converted = distrun("convert", "cache.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert converted.stdout.count("checkpoint.cache_first") == 3, converted.stdout
    two = distrun("launch", "--nproc-per-node", "2", "--check", "--timeout", "60",
                  "cache_ddp.py", cwd=tmp_path)
    assert two.returncode == 0, two.stdout + two.stderr
    for made in ("vocab.pkl", "features.npy", "labels.json", "table.pt"):
        assert (tmp_path / made).is_file(), made


@pytest.mark.parametrize("target", ["ddp", "accelerate"])
def test_a_model_that_owns_its_network_saves_the_original_s_keys(tmp_path: Path,
                                                                 target: str) -> None:
    """DomainBed's style: an nn.Module owning its network and optimizer, saved whole. Its
    DDP object (accelerate's prepared model), made in its __init__, is kept out of its
    submodules: the checkpoint has the original's keys (no `ddp_network.module.*` beside
    `network.*`) and its weights. Under accelerate the loader is prepared before the model
    is built (another scope), inside `torch.random.fork_rng`: accelerate's prepare draws
    its sampler's seed from torch's generator, which would otherwise give the model other
    initial weights than the original's."""
    from tests.e2e.test_corpus_equivalence import (
        assert_same_checkpoint,
        run_single,
        run_two,
    )

    if target == "ddp":  # the batch's case (convert --to ddp -o owns_ddp.py)
        run = CLASSES.result("owns")
        conv = run.convert
        assert conv.returncode == 0, conv.stdout + conv.stderr
        run.assert_single_ran()
        run.assert_two_ran()
        assert_same_checkpoint(run.folder)
        return
    script = tmp_path / "owns.py"
    script.write_text((ROOT / "tests/convert/fixtures/model/module_owns_network.py").read_text())
    converted = tmp_path / f"owns_{target}.py"
    conv = distrun("convert", str(script), "--to", target, "-o", str(converted))
    assert conv.returncode == 0, conv.stdout + conv.stderr
    run_single(script, tmp_path)
    run_two(converted, tmp_path, launcher="accelerate" if target == "accelerate" else "torchrun")
    if target == "accelerate":
        assert "with torch.random.fork_rng(devices=[]):" in converted.read_text()
    assert_same_checkpoint(tmp_path)


def test_parameters_unfrozen_during_training_are_an_error_and_the_check_sees_them_apart(
        tmp_path: Path) -> None:
    """Progressive unfreezing (frozen before the DDP object is made, unfrozen at epoch 2,
    given to the optimizer with add_param_group): convert refuses, with the line; a
    --partial conversion run under `launch --check` is caught when the unfrozen layer's
    weights part (before, the probe itself crashed on the optimizer's new group)."""
    fixture = ROOT / "tests/convert/fixtures/hazards/unfrozen_in_training.py"
    (tmp_path / "unfreeze.py").write_text(fixture.read_text())
    refused = distrun("convert", "unfreeze.py", cwd=tmp_path)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "unfreeze.py:17: error:" in refused.stdout + refused.stderr
    assert "[hazards.unfrozen_in_training]" in refused.stdout + refused.stderr
    assert not (tmp_path / "unfreeze_ddp.py").exists()
    partial = distrun("convert", "--partial", "unfreeze.py", cwd=tmp_path)
    assert (tmp_path / "unfreeze_ddp.py").is_file(), partial.stdout + partial.stderr
    two = distrun("launch", "--nproc-per-node", "2", "--check", "unfreeze_ddp.py",
                  cwd=tmp_path)
    assert two.returncode == 3, two.stdout + two.stderr
    assert "[params-diverged]" in two.stdout + two.stderr
    assert "`0.weight` differs between rank 0 and rank 1" in two.stdout + two.stderr


def test_loaders_by_phase_shard_the_training_phase_only() -> None:
    """The transfer-learning tutorial's loop: one DataLoader call in a comprehension makes
    the loader of each phase, read as `dataloaders[phase]`; the best epoch's weights are
    kept by validation accuracy. Only the training loader is sharded (16 per rank), every
    rank evaluates the whole validation set and keeps the same epoch: the original's
    weights (before, the dataset hoisted out of the comprehension was a NameError)."""
    run = CLASSES.result("phases")  # batch 32; 16 per rank
    run.assert_single_ran()
    converted = run.convert
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "data.phase_loaders" in converted.stdout
    # the batch_size is now each rank's: said in the closing note, as for other loaders
    assert "\nbatch: each process reads batch_size samples per step" in converted.stdout
    run.assert_two_ran()
    expected, got = torch.load(run.folder / "single.pt"), torch.load(run.folder / "multi.pt")
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        assert torch.allclose(value, got[key], atol=1e-5), key


def test_a_download_by_hand_runs_on_rank_0_only(tmp_path: Path) -> None:
    """A helper that downloads an archive (torch.hub.download_url_to_file, here from a
    file:// URL), extracts it and deletes it: on every rank at once one rank deletes the
    archive another reads. Converted, it runs on rank 0, the others taking its result."""
    import io
    import tarfile

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.random.default_rng(0).random((32, 5)))
    source = tmp_path / "source.tar.gz"
    with tarfile.open(source, "w:gz") as tar:
        info = tarfile.TarInfo("data.npy")
        info.size = len(buffer.getvalue())
        tar.addfile(info, io.BytesIO(buffer.getvalue()))
    fixture = ROOT / "tests/convert/fixtures/download/hand_download.py"
    (tmp_path / "fetch.py").write_text(fixture.read_text())
    converted = distrun("convert", "fetch.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "download.rank0_call" in converted.stdout
    two = distrun("launch", "--nproc-per-node", "2", "--check", "fetch_ddp.py", cwd=tmp_path,
                  env={"DATA_URL": source.as_uri()})
    assert two.returncode == 0, two.stdout + two.stderr
    assert (tmp_path / "data" / "data.npy").is_file()
    assert not (tmp_path / "data" / "data.tar.gz").exists()


def test_a_download_at_the_top_of_the_script_when_missing_is_made_once(tmp_path: Path) -> None:
    """A notebook's download cell as a script: `if not os.path.exists("data"):` download a
    zip (here from a file:// URL), extract it, delete it. Converted, rank 0 runs the `if`
    first, the others find the folder; the run trains like the original on one process
    (before, every rank downloaded, extracted and deleted the same zip, silently: convert
    said nothing)."""
    import io
    import zipfile

    import numpy as np

    from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

    buffer = io.BytesIO()
    np.save(buffer, np.random.default_rng(0).random((64, 5)))
    source = tmp_path / "source.zip"
    with zipfile.ZipFile(source, "w") as archive:
        archive.writestr("data.npy", buffer.getvalue())
    fixture = ROOT / "tests/convert/fixtures/download/inline_when_missing.py"
    single_dir, two_dir = tmp_path / "one", tmp_path / "two"
    for folder in (single_dir, two_dir):
        folder.mkdir()
        (folder / "fetch.py").write_text(fixture.read_text())
    converted = distrun("convert", "fetch.py", cwd=two_dir)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "download.when_missing" in converted.stdout
    env = {"DATA_URL": source.as_uri()}
    run_single(single_dir / "fetch.py", single_dir, env=env)
    run_two(two_dir / "fetch_ddp.py", two_dir, env=env)
    assert (two_dir / "data" / "data.npy").is_file()
    assert not (two_dir / "data.zip").exists()
    (two_dir / "single.pt").write_bytes((single_dir / "single.pt").read_bytes())
    assert_same_checkpoint(two_dir)


def test_a_statistics_pass_over_a_shuffled_loader_stays_whole() -> None:
    """pytorch-cifar's get_mean_and_std: a loader that shuffles, read by a function that
    never trains. Left whole, every rank normalises with the original's mean and std and
    the run trains like the original (sharded, each rank's statistics were its half's)."""
    from tests.e2e.test_corpus_equivalence import assert_same_checkpoint

    run = CLASSES.result("stats")
    converted = run.convert
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "[data.statistics_pass]" in converted.stdout
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_helper_module_shared_with_another_entry_point_still_runs_there(
        tmp_path: Path) -> None:
    """han_text's shape: utils.py serves the training script (converted, with its modules,
    in place) and a preprocessing script run alone before it (not converted). The saves of
    utils.py are rank 0's, then every rank waits: in the preprocessing script, started
    without a launcher, there is no process group and nobody to wait for, and the loader
    helper's DistributedSampler is told the world from the environment (before, both:
    "ValueError: Default process group has not been initialized"). Then the converted
    training on 2 processes is the original's."""
    import shutil

    from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

    source = ROOT / "tests/convert/fixtures/project/helper_shared_with_prep/in"
    single, two = tmp_path / "single", tmp_path / "two"
    shutil.copytree(source, single)
    shutil.copytree(source, two)
    converted = distrun("convert", "train.py", "--in-place", "--no-backup", cwd=two)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "barrier_if_initialized()" in (two / "utils.py").read_text()
    for folder in (single, two):
        prepared = run_cmd([sys.executable, "prepare.py"], cwd=folder)
        assert prepared.returncode == 0, prepared.stderr
        assert (folder / "inputs" / "data.pt").is_file()
        assert prepared.stdout.split() == ["64", "samples"]  # the whole set, one process
    run_single(single / "train.py", single)
    run_two(two / "train.py", two)
    shutil.copy(single / "single.pt", two / "single.pt")
    assert_same_checkpoint(two)
