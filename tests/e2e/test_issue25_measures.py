"""Issue 25's classes about passes over the data that do not train, end to end: a loader
helper that the training shards, called again to measure (a Fisher information kept for
the next task's penalty, an evaluation), and DARTS' architecture weights, stepped by an
optimizer built from the model's own methods with gradients set by hand, the validation
given the architecture's sharded loader. Each converted script runs on 2 processes
(gloo) under `launch --check`, its checkpoint compared with the original's on one
process (batch 64 against 32 per rank) to 1e-5, and the printed measures too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two
from tests.e2e.test_issue25_steps import assert_same_metrics, convert_fixture

pytestmark = pytest.mark.e2e


def test_a_loader_helper_called_to_measure_reads_the_whole_set(tmp_path: Path) -> None:
    """kuc2477/pytorch-ewc: `get_data_loader` makes every loader; the sampler added for the
    training loop sharded the Fisher estimate's and the evaluation's too. The Fisher was
    each rank's share's (rank 0 saved its own: 0.023 from the original's, with launch
    --check clean) and the precision printed was rank 0's half. Each measuring call now
    reads the loader whole (`whole_loader(...)`): the Fisher, the weights and the
    printed precision are the original's."""
    script, said = convert_fixture(tmp_path, "data/helper_loader_measured.py", "ewc")
    assert said.count("data.whole_for_measures") == 2, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "ewc_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 2)


def test_architecture_weights_stepped_beside_the_network_stay_in_step(tmp_path: Path) -> None:
    """khanrc/pt.darts, first order: `SGD(model.weights())` and `Adam(model.alphas())`,
    methods of the controller, were not followed (convert refused: "no model found").
    Now the network's gradients are averaged by hand before its clip and step, the
    architecture's (from `torch.autograd.grad`, set by hand) before its step, and the
    validation reads its loader whole: weights, alphas and printed counts are the
    original's."""
    script, said = convert_fixture(tmp_path, "model/architecture_weights.py", "darts")
    assert "model.free_tensors" in said and "data.whole_for_measures" in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "darts_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 3)
