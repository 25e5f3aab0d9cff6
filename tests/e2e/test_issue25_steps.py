"""Issue 25's classes about what a step computes, end to end: layers whose parameters get
no gradient (never called, or called with an output no kept value depends on), a loss
added up by hand over the batch's samples, and batches drawn at random at every step.
Each converted script runs on 2 processes (gloo) under `launch --check`; where the
training is the original's, its weights are compared with the original's on one process
(batch 64 against 32 per rank) to 1e-5."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, distrun
from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

pytestmark = pytest.mark.e2e

FIXTURES = ROOT / "tests/convert/fixtures"


@pytest.mark.parametrize(("case", "said"), [
    ("model/unused_layer", "spare.py:15: model.find_unused: `Net.spare` is built and never used"),
    ("model/dead_output", "spare.py:26: model.find_unused: `Net.attn` is called in `forward`, "
                          "but no output the training keeps depends on it"),
])
def test_a_layer_without_gradient_does_not_stop_ddp(tmp_path: Path, case: str,
                                                      said: str) -> None:
    """A layer the model builds and never calls, or calls for an output the training
    drops, gets no gradient: DDP stops every rank at the second step ("Expected to have
    finished reduction in the prior iteration"). Converted, the DDP object is made with
    find_unused_parameters=True, and the run is the original's."""
    script = tmp_path / "spare.py"
    script.write_text((FIXTURES / f"{case}.py").read_text())
    converted = distrun("convert", "spare.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert said in converted.stdout, converted.stdout
    run_single(script, tmp_path)
    run_two(tmp_path / "spare_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)


def test_a_loss_summed_by_hand_over_the_batch_keeps_the_step(tmp_path: Path) -> None:
    """`loss += criterion(out[i], y[i])` for each sample of the batch is a sum over the
    batch: each rank's covers half of it and DDP averages, so unscaled every step would
    be half the original's (the weights differ by far more than 1e-5 after 3 SGD steps)."""
    script = tmp_path / "summed.py"
    script.write_text((FIXTURES / "loss/summed_by_hand.py").read_text().replace(
        "torch.randn(32, 3, 4), torch.randn(32, 3, 1)",
        "torch.randn(64, 3, 4), torch.randn(64, 3, 1)"))
    converted = distrun("convert", "summed.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "summed.py:26: loss.sum_reduction" in converted.stdout, converted.stdout
    run_single(script, tmp_path)
    run_two(tmp_path / "summed_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)


# Every call of torch.randint made by the script is logged to draws_<RANK>.txt: a shim on
# PYTHONPATH (Python imports sitecustomize at start-up), so the script is run unedited.
SITECUSTOMIZE = '''\
import os
import torch

_randint = torch.randint


def _logged(*args, **kwargs):
    drawn = _randint(*args, **kwargs)
    if drawn.dim() == 1:
        with open(os.path.join(os.environ["DRAWS_DIR"], f"draws_{os.environ.get('RANK', '0')}.txt"),
                  "a") as log:
            log.write(" ".join(map(str, drawn.tolist())) + "\\n")
    return drawn


torch.randint = _logged
'''


def test_batches_drawn_at_random_every_step_are_each_rank_s_own(tmp_path: Path) -> None:
    """nanoGPT's get_batch: `torch.randint(len(data), (batch_size,))` at every step, torch
    seeded once at the top. Converted, each rank draws other samples than the other's
    (seeded alike and not reseeded by rank, both would draw the same ones: a step on 2
    ranks would be one batch twice), and the run passes the check on 2 processes."""
    script = tmp_path / "draws.py"
    script.write_text((FIXTURES / "data/random_draws.py").read_text())
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    converted = distrun("convert", "draws.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "draws.py:23: data.random_draws" in converted.stdout, converted.stdout
    env = {"PYTHONPATH": str(shim), "DRAWS_DIR": str(tmp_path), "STEPS": "5"}
    run_two(tmp_path / "draws_ddp.py", tmp_path, env={**env, "BATCH_SIZE": "8"})
    drawn = [(tmp_path / f"draws_{rank}.txt").read_text().splitlines() for rank in (0, 1)]
    assert len(drawn[0]) == len(drawn[1]) == 5, drawn
    assert all(a != b for a, b in zip(*drawn, strict=True)), drawn


def test_a_loop_left_on_the_loss_is_left_at_the_same_step_by_every_rank(tmp_path: Path) -> None:
    """`if step_loss < 0.5: break` and `scheduler.step(step_loss)` (ReduceLROnPlateau) on
    the step's loss, every other sample noisy: the whole batch goes under 0.5 at epoch 13;
    rank 0's share alone (the clean samples) would at epoch 8, and its scheduler would
    lower the rate at another epoch than rank 1's from epoch 11 (computed by hand). Without
    the agreement rank 0 left first and rank 1 waited in DDP's all-reduce until stopped
    (seen by hand). Converted, both read the mean over the ranks: they leave at epoch 13,
    as the single process does, with its weights (so with its learning rates)."""
    script = tmp_path / "stop.py"
    script.write_text((FIXTURES / "agreed/loss_tests.py").read_text())
    converted = distrun("convert", "stop.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "stop.py:41: agreed.exit" in converted.stdout
    assert "stop.py:38: agreed.scheduler" in converted.stdout, converted.stdout
    single = run_single(script, tmp_path)
    assert "stopped at epoch 13" in single.stdout
    multi = run_two(tmp_path / "stop_ddp.py", tmp_path)
    assert "stopped at epoch 13" in multi.stdout, multi.stdout
    assert_same_checkpoint(tmp_path)
