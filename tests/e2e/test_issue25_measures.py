"""Issue 25's classes about passes over the data that do not train, gradients taken by
hand and losses over the whole batch, end to end: a loader helper that the training
shards, called again to measure (a Fisher information kept for the next task's penalty,
an evaluation); DARTS' architecture weights, stepped by an optimizer built from the
model's own methods with gradients set by hand, the validation handed the architecture's
sharded loader; DARTS' virtual step, the network's gradients taken with
`torch.autograd.grad` moving a copy of it; a soft Dice over the flattened batch. Proven together (tests/batched.py: one original process, one launch of 2
ranks, gloo, no `--check`): each conversion's checkpoint equal to the original's on one
process (batch 64 against 32 per rank) to 1e-5, and what it prints too."""

from __future__ import annotations

import subprocess

import pytest

from tests.batched import FIXTURES, Batch, Case, Result, fixture_case
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
