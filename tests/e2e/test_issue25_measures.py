"""Issue 25's classes found by the rounds of 2026-11-28's third stop, end to end: passes
over the data that do not train (a loader helper called again to measure, a validation
handed the sharded loader), DARTS (optimizers built from the model's own methods,
gradients set by hand, a virtual step from `torch.autograd.grad`), a soft Dice over the
flattened batch, batches cut in a loop numbered with enumerate, peers kept in lists, a
loader read through a `with` binding, dormant distributed helpers, and data drawn from an
unseeded numpy. Proven together where the assertions are the weights and what is printed
(tests/batched.py: one original process, one launch of 2 ranks, gloo, no `--check`):
each conversion's checkpoint equal to the original's on one process (batch 64 against 32
per rank) to 1e-5. The unseeded case has no original to equal: its own launch, under
`--check`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.batched import FIXTURES, Batch, Case, Result, fixture_case, project_case
from tests.conftest import distrun
from tests.e2e.test_corpus_equivalence import assert_same_checkpoint
from tests.e2e.test_issue25_steps import assert_same_metrics

pytestmark = pytest.mark.e2e

MEASURES = Batch("issue25_measures", [
    fixture_case("ewc", "data/helper_loader_measured.py", "ewc"),
    fixture_case("darts", "model/architecture_weights.py", "darts"),
    fixture_case("virtual", "model/virtual_step.py", "virtual"),
    fixture_case("dice", "loss/dice_over_batch.py", "dice"),
    Case("slices", "slices.py", "slices_ddp.py", ("slices.py",),
         files={"slices.py": (FIXTURES / "data/slices_enumerated.py").read_text()},
         two_env={"BATCH_SIZE": "64"}),  # the ranks split each of the original's batches
    fixture_case("peers", "model/peers_in_lists.py", "peers"),
    fixture_case("with", "data/loader_in_with.py", "with"),
    project_case("dormant", "project/dormant_dist_helpers/in", "train.py"),
    fixture_case("detached", "model/detached_output.py", "detached"),
    fixture_case("step_object", "loss/step_in_loss_object.py", "step_object"),
    fixture_case("dict", "data/loaders_in_a_dict.py", "dict"),
    fixture_case("own_sampler", "data/own_sampler_by_steps.py", "own_sampler"),
    fixture_case("reentrant", "model/checkpoint_with_spare_layer.py", "reentrant"),
    fixture_case("seqfirst", "data/sequence_first_slices.py", "seqfirst"),
])


def _proven(name: str, metrics: int) -> Result:
    """The case ran on one process and on two, with the original's weights and
    `metrics` lines printed alike."""
    run = MEASURES.result(name)
    assert run.convert.returncode == 0, run.convert.stdout + run.convert.stderr
    single = run.assert_single_ran()
    rank0 = run.assert_two_ran()[0]
    assert_same_checkpoint(run.folder)
    assert_same_metrics(subprocess.CompletedProcess([], 0, single.stdout, ""),
                        subprocess.CompletedProcess([], 0, rank0.stdout, ""), metrics)
    return run


def test_a_loader_helper_called_to_measure_reads_the_whole_set() -> None:
    """kuc2477/pytorch-ewc: `get_data_loader` makes every loader; the sampler added for the
    training loop sharded the Fisher estimate's and the evaluation's too. The Fisher was
    each rank's share's (rank 0 saved its own: 0.023 from the original's, with launch
    --check clean) and the precision printed was rank 0's half. Each measuring call now
    reads the loader whole (`whole_loader(...)`): the Fisher, the weights and the
    printed precision are the original's."""
    run = _proven("ewc", 2)
    assert run.convert.stdout.count("data.whole_for_measures") == 2, run.convert.stdout


def test_architecture_weights_stepped_beside_the_network_stay_in_step() -> None:
    """khanrc/pt.darts, first order: `SGD(model.weights())` and `Adam(model.alphas())`,
    methods of the controller, were not followed (convert refused: "no model found").
    Now the network's gradients are averaged by hand before its clip and step, the
    architecture's (from `torch.autograd.grad`, set by hand) before its step, and the
    validation reads its loader whole: weights, alphas and printed counts are the
    original's."""
    run = _proven("darts", 3)
    said = run.convert.stdout
    assert "model.free_tensors" in said and "data.whole_for_measures" in said, said


def test_a_virtual_step_takes_the_whole_batch_s_gradients() -> None:
    """DARTS' second order: `grads = torch.autograd.grad(loss, self.net.weights())` moves
    a deep copy of the network, w - xi * g, whose validation loss gives the architecture
    weight's gradient. Each rank's g was its share's (alpha 8.5e-04 from the original's
    after 3 steps, launch --check clean); averaged over the ranks
    (`averaged_gradients(...)`, model.taken_gradients), the run is the original's."""
    run = _proven("virtual", 0)
    assert "model.taken_gradients" in run.convert.stdout, run.convert.stdout


def test_a_dice_over_the_whole_batch_is_the_whole_batch_s() -> None:
    """A soft Dice whose intersection and sums run over every pixel of every image of the
    batch (`view(-1)` then `.sum()`), one ratio: each rank's ratio over its half is
    another loss (0.125 from the original's weights after 3 steps, launch --check
    clean, the epoch losses 1.2826 against 1.2806). The loss's arguments are gathered
    from every rank (`gather_batch`, batch_loss.gather): the weights and the printed
    losses are the original's."""
    run = _proven("dice", 3)
    assert "a ratio of sums over the whole batch" in run.convert.stdout, run.convert.stdout


def test_batches_cut_in_a_loop_numbered_with_enumerate_are_split() -> None:
    """mtoneva/example_forgetting: `for batch_idx, start in enumerate(range(0, N, bs))`
    cutting `permutation[start:start + bs]` was not taken (a loop of a tuple target):
    convert refused (data.no_loader). Each cut now goes through `rank_slice` and the
    permutation is rank 0's: the same batch size splits each of the original's batches
    among the ranks, and the weights are the original's."""
    run = _proven("slices", 0)
    assert "data.rank_slices" in run.convert.stdout, run.convert.stdout


def test_peers_kept_in_lists_are_averaged_by_hand() -> None:
    """chxy95/Deep-Mutual-Learning: two networks appended to `self.models`, their
    optimizers to `self.optimizers`, called through the loop's variable and stepped as
    `self.optimizers[i].step()`: convert refused (model.no_forward). Each network now
    starts from rank 0's weights and its gradients are averaged by hand before each step
    through the list (model.hand_average): both peers are the original's."""
    run = _proven("peers", 0)
    assert "model.hand_average" in run.convert.stdout, run.convert.stdout
    assert (run.conv / "peers_ddp.py").read_text().count(
        "average_gradients(self.optimizers[i])") == 1


def test_a_loader_read_through_a_with_binding_is_sharded() -> None:
    """shengliu66/ELR's trainer: `with tqdm(self.data_loader) as progress:` then
    `enumerate(progress)`, the loader made by a DataLoader subclass. The binding was not
    followed: the loader stayed whole on every rank, convert exit 0 with no word (launch
    --check: [unsharded-data]). It is rebuilt sharded (`shard_loader`): the weights are the
    original's."""
    run = _proven("with", 0)
    assert "data.rebuild_loader" in run.convert.stdout, run.convert.stdout


def test_dormant_distributed_helpers_do_not_make_a_project_distributed() -> None:
    """The torchvision detection tutorial's utils.py (reduce_dict behind `if world_size <
    2: return`, init_distributed_mode never called) made convert say "already
    distributed, nothing to do": each rank trained a copy of its own (launch --check:
    [no-process-group]). The project is converted, its helpers come alive under the
    process group, and the weights are the original's."""
    run = _proven("dormant", 0)
    assert "already distributed" not in run.convert.stdout, run.convert.stdout


def test_a_layer_whose_output_forward_detaches_does_not_stop_ddp() -> None:
    """PetrochukM/PyTorch-NLP's SNLI example: `if self.config.fix_emb: emb = emb.detach()`
    leaves the embedding without gradients, and DDP stopped both ranks at the second step
    ("Expected to have finished reduction in the prior iteration"). The DDP object is made
    with find_unused_parameters=True (model.find_unused): the run is the original's."""
    run = _proven("detached", 0)
    assert "has its output detached in `forward`" in run.convert.stdout, run.convert.stdout


UNSEEDED = """\\
import copy
import os

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Task:  # torch never seeded: data drawn when the task is made
    def __init__(self, n):
        self.x, self.y = torch.randn(n, 4), torch.randint(0, 3, (n,))


task = Task(64)
x, y = task.x, task.y
for i in range(len(y)):  # label noise drawn sample by sample, numpy never seeded
    if np.random.rand() < 0.4:
        y[i] = int(np.random.randint(3))
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Linear(4, 3)
initial = copy.deepcopy(model.state_dict())  # the weights to rewind to (a lottery ticket)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for round in range(2):
    for epoch in range(2):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.load_state_dict(initial)
"""


def test_data_drawn_from_unseeded_generators_is_the_same_on_every_rank(tmp_path: Path) -> None:
    """ELR's label noise, drawn per sample with numpy's global generator, which the script
    never seeds: each process started it from its own entropy, so each rank trained on
    other labels (launch --check: [split-differs], convert silent). The same for torch's
    (its initial seed differs by process too): data drawn when an object is made, and the
    lottery ticket's initial weights kept before the wrap and rewound to (each rank's own:
    [params-diverged] after the rewind). After the set-up every rank takes rank 0's
    generator states (data.same_generator): the check finds the ranks alike."""
    (tmp_path / "noisy.py").write_text(UNSEEDED)
    converted = distrun("convert", "noisy.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert converted.stdout.count("data.same_generator") == 2, converted.stdout
    launched = distrun("launch", "--nproc-per-node", "2", "--check", "noisy_ddp.py",
                       cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "no problem found" in launched.stderr, launched.stderr


def test_ranks_stop_early_together_on_a_whole_evaluation_with_batchnorm(tmp_path: Path) -> None:
    """BlamerX's Kaggle fold loop: early stopping on a validation RMSE computed by the
    model itself (its evaluation left whole) with BatchNorm. Each rank evaluated with its
    own running statistics, the ranks stopped at different epochs, and one waited for the
    other at the next fold's first step: the job hung (launch's --timeout stopped it).
    Rank 0's buffers now go to every rank before the evaluation (evaluation.buffers): the
    ranks agree, and the job ends."""
    script = tmp_path / "stop.py"
    script.write_text((FIXTURES / "evaluation/early_stop_batchnorm.py").read_text())
    converted = distrun("convert", "stop.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "evaluation.buffers" in converted.stdout, converted.stdout
    launched = distrun("launch", "--nproc-per-node", "2", "--timeout", "60", "stop_ddp.py",
                       cwd=tmp_path, env={"BATCH_SIZE": "32"})
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert launched.stdout.count("stopped at epoch") == 2, launched.stdout


def test_a_step_inside_a_loss_object_trains_on_the_whole_batch_s_tokens() -> None:
    """The Annotated Transformer's SimpleLossCompute (hinesboy/transformer-simple): the
    batch loop calls the model, then a loss object whose `__call__` divides by the
    batch's token count, runs the backward and steps; the batches a list a function
    builds. Convert refused ("no training forward", "no DataLoader"). Now the loop is a
    training loop, its list goes through `rank_batches` and the token count given to
    `__call__` is its mean over the ranks: sentences sorted by length give the ranks'
    shares other counts (0.0105 from the original's weights with each rank's own)."""
    run = _proven("step_object", 0)
    said = run.convert.stdout
    assert "data.rank_batches" in said and "loss.count_divisor" in said, said


def test_loaders_kept_in_a_dict_are_followed_by_name_and_key() -> None:
    """izmailovpavel/torch_swa_examples: `loaders = {"train": ..., "test": ...}`. The
    training loader was sharded by an AutoEpochSampler (its passes not followed), the test
    loader "cannot tell" (left whole, a warning), the sums returned as the epoch's metrics
    were rank 0's share's and SWA's `update_bn(loaders["train"], swa_model)` read the
    shard: the averaged model's BatchNorm statistics each rank's own. Now `loaders['train']`
    is a name like any other: DistributedSampler and set_epoch, the test loader left
    whole, the sums all-reduced, update_bn given the whole set. BatchNorm keeps the
    weights from being exact: the counts and the whole-set check are compared."""
    run = MEASURES.result("dict")
    assert run.convert.returncode == 0, run.convert.stdout + run.convert.stderr
    said = run.convert.stdout
    for rule in ("data.set_epoch", "data.eval_unsharded", "data.train_metrics",
                 "data.measured_on_shard"):
        assert rule in said, said
    assert "unknown_loader" not in said, said
    single, rank0 = run.assert_single_ran(), run.assert_two_ran()[0]
    assert "metrics 3 whole set 1" in single.stdout, single.stdout
    assert_same_metrics(subprocess.CompletedProcess([], 0, single.stdout, ""),
                        subprocess.CompletedProcess([], 0, rank0.stdout, ""), 4)


def test_a_sampler_of_the_project_sized_by_steps_is_shared_out_whole() -> None:
    """perrying/pytorch-consistency-regularization's InfiniteSampler: a Sampler subclass
    of the project listing randperm passes, `steps * batch_size` samples. Convert refused
    ("this training DataLoader already has a sampler"). Now its indices are shared out
    (`RankShareSampler`) and the count, made from one rank's batch, is x WORLD_SIZE:
    without it each rank took 2 steps of the original's 4."""
    run = _proven("own_sampler", 1)
    said = run.convert.stdout
    assert "data.share_sampler" in said and "data.sampler_count" in said, said


def test_reentrant_checkpointing_in_a_model_with_a_spare_layer_trains() -> None:
    """gpleiss/efficient_densenet_pytorch's `cp.checkpoint(f, *x)` (reentrant by default)
    in a model that also builds a layer it never calls: find_unused_parameters=True, which
    the spare layer needs, made DDP stop both ranks at the first step ("Expected to mark a
    variable ready only once"). The checkpoint calls are made `use_reentrant=False`."""
    run = _proven("reentrant", 0)
    said = run.convert.stdout
    assert "model.find_unused" in said and "model.checkpoint_reentrant" in said, said


def test_sequence_first_batches_cut_by_hand_are_split_on_their_batch_axis() -> None:
    """lkulowski/LSTM_encoder_decoder: `input_tensor[:, b: b + batch_size, :]`, the
    samples on axis 1. Refused ("no DataLoader found"): only `X[i:i + bs]` was a cut. The
    ranks now split each batch on its axis (`rank_slice(..., dim=1)`); the script keeps its
    batch size, the weights are the original's."""
    run = _proven("seqfirst", 0)
    assert "dim=1" in (run.folder / "conv" / "seqfirst_ddp.py").read_text()
