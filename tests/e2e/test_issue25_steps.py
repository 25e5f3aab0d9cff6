"""Issue 25's classes about what a step computes, end to end: layers whose parameters get
no gradient (never called, or called with an output no kept value depends on), a loss
added up by hand over the batch's samples, batches drawn at random at every step, and
tests of a rank's own loss (a loop's exit, the best weights kept).
Each converted script runs on 2 processes (gloo); where the training is the original's,
its weights are compared with the original's on one process (batch 64 against 32 per
rank) to 1e-5. The tests that assert only that (and convert's report) share one original
process and one launch, without `--check` (STEPS, tests/batched.py); the others, each
under `launch --check`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tests.batched import Batch, Case, Result, fixture_case, project_case
from tests.conftest import ROOT, distrun
from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

pytestmark = pytest.mark.e2e

FIXTURES = ROOT / "tests/convert/fixtures"
UNUSED = ["model/unused_layer", "model/dead_output", "model/backbone_parts"]

# The tests whose assertions are convert's report, both runs' exit 0 and the same
# checkpoint: proven together, one original process and one launch for all
# (tests/batched.py; no `--check`: the tests of what the check finds launch their own).
STEPS = Batch("issue25_steps", [
    *(fixture_case(case.replace("/", "-"), f"{case}.py", "spare") for case in UNUSED),
    fixture_case("idle", "model/sometimes_idle.py", "idle"),
    fixture_case("summed", "", "summed", (FIXTURES / "loss/summed_by_hand.py").read_text(
    ).replace("torch.randn(32, 3, 4), torch.randn(32, 3, 1)",
              "torch.randn(64, 3, 4), torch.randn(64, 3, 1)")),
    fixture_case("best", "agreed/best_on_training_loss.py", "best"),
    fixture_case("stream", "data/iterable_stream.py", "stream"),
    fixture_case("listed", "data/list_of_batches.py", "listed"),
    fixture_case("accum", "data/batch_class_named_loader.py", "accum"),
    fixture_case("distill", "model/container_model.py", "distill"),
    fixture_case("slices", "data/slices_by_hand.py", "slices"),
    fixture_case("cycle", "data/schedule_from_dataset.py", "cycle"),
    fixture_case("chain", "model/handed_on_twice.py", "chain"),
    fixture_case("fit", "data/fit_given_two_kinds.py", "fit"),
    fixture_case("count", "loss/count_divisor.py", "count"),
    project_case("static", "project/static_step_by_name/in", "main.py"),
    Case("bank", "bank.py", "bank_ddp.py", ("bank.py",),
         files={"bank.py": (FIXTURES / "data/memory_bank.py").read_text()},
         single_env={"BATCH_SIZE": "32"}, two_env={"BATCH_SIZE": "16"}),
    fixture_case("side", "model/side_forward.py", "side"),
    fixture_case("meta", "model/meta_learner_forward.py", "meta"),
    fixture_case("pk", "data/pk_batch_hard.py", "pk"),
    Case("subclass", "train.py", "train.py", ("train.py", "--in-place", "--no-backup"),
         trees={".": FIXTURES / "project/loader_subclass_and_demo/in"}),
    fixture_case("zipped", "data/two_loaders_zipped.py", "zipped"),
])


def convert_fixture(tmp_path: Path, fixture: str, name: str) -> tuple[Path, str]:
    """The fixture FIXTURES/`fixture` as `tmp_path`/NAME.py, converted there (exit 0): the
    script and convert's report."""
    script = tmp_path / f"{name}.py"
    script.write_text((FIXTURES / fixture).read_text())
    converted = distrun("convert", script.name, cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    return script, converted.stdout


def converted_said(run: Result) -> str:
    """convert's report of the batch's case (as convert_fixture: an exit 0 asserted)."""
    assert run.convert.returncode == 0, run.convert.stdout + run.convert.stderr
    return run.convert.stdout


@pytest.mark.parametrize(("case", "said"), [
    (UNUSED[0], "spare.py:15: model.find_unused: `Net.spare` is built and never used"),
    (UNUSED[1], "spare.py:26: model.find_unused: `Net.attn` is called in `forward`, "
                          "but no output the training keeps depends on it"),
    (UNUSED[2], "spare.py:31: model.find_unused: `Embedder.pretrained` is never "
                             "called whole, only its parts (`stem`, `body`)"),
])
def test_a_layer_without_gradient_does_not_stop_ddp(case: str, said: str) -> None:
    """A layer the model builds and never calls, calls for an output the training
    drops, or a backbone made by a factory and called part by part (its `fc` never), gets
    no gradient: DDP stops every rank at the second step ("Expected to have
    finished reduction in the prior iteration"). Converted, the DDP object is made with
    find_unused_parameters=True, and the run is the original's."""
    run = STEPS.result(case.replace("/", "-"))
    converted = run.convert
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert said in converted.stdout, converted.stdout
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_layers_a_step_may_leave_without_gradient_do_not_stop_ddp() -> None:
    """A backbone run under `torch.no_grad()` inside forward, never frozen (yunjey's image
    captioning), and an embedding used only when the step passes labels (a conditional
    diffusion model's label dropout): their parameters get no gradient at some steps. DDP
    stopped every rank ("Expected to have finished reduction in the prior iteration"),
    rank 1 after its head had already diverged. Made with find_unused_parameters=True, the
    run is the original's."""
    run = STEPS.result("idle")
    said = converted_said(run)
    assert said.count("model.find_unused") == 2, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_loss_summed_by_hand_over_the_batch_keeps_the_step() -> None:
    """`loss += criterion(out[i], y[i])` for each sample of the batch is a sum over the
    batch: each rank's covers half of it and DDP averages, so unscaled every step would
    be half the original's (the weights differ by far more than 1e-5 after 3 SGD steps)."""
    run = STEPS.result("summed")
    converted = run.convert
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "summed.py:26: loss.sum_reduction" in converted.stdout, converted.stdout
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


# Every call of torch.randint made by the script is logged to draws_<RANK>.txt: a shim on
# PYTHONPATH (Python imports sitecustomize at start-up), so the script is run unedited.
SITECUSTOMIZE = '''\
import os
import torch

_name = os.environ["DRAW_FN"]  # randint, randn
_draw = getattr(torch, _name)


def _logged(*args, **kwargs):
    drawn = _draw(*args, **kwargs)
    # the batch's indices; the GAN's noise (z of 4), not its data set (64 x 8)
    if drawn.dim() == 1 if _name == "randint" else drawn.dim() == 2 and drawn.shape[-1] == 4:
        with open(os.path.join(os.environ["DRAWS_DIR"], f"draws_{os.environ.get('RANK', '0')}.txt"),
                  "a") as log:
            log.write(" ".join(f"{v:.6g}" for v in drawn.flatten().tolist()) + "\\n")
    return drawn


setattr(torch, _name, _logged)
'''


@pytest.mark.parametrize(("case", "fn", "said", "before"), [
    ("data/random_draws", "randint", "draws.py:23: data.random_draws: each step draws its "
     "samples", 0),
    ("data/gan_noise", "randn", "draws.py:18: data.random_draws: each step draws values for "
     "the model", 1),
])
def test_batches_drawn_at_random_every_step_are_each_rank_s_own(
        tmp_path: Path, case: str, fn: str, said: str, before: int) -> None:
    """nanoGPT's get_batch (`torch.randint(len(data), (batch_size,))` at every step, no
    DataLoader) and a GAN's latent noise (`torch.randn(bs, z)` at every step beside a
    sharded DataLoader), torch seeded once at the top. Converted, each rank draws other
    values than the other's at every step (seeded alike and not reseeded by rank, both
    would draw the same: a step on 2 ranks would see one batch, or one noise, twice); what
    is drawn once before the loop (the GAN's fixed noise) stays the same on every rank."""
    script = tmp_path / "draws.py"
    script.write_text((FIXTURES / f"{case}.py").read_text())
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    converted = distrun("convert", "draws.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert said in converted.stdout, converted.stdout
    env = {"PYTHONPATH": str(shim), "DRAWS_DIR": str(tmp_path), "STEPS": "5", "DRAW_FN": fn}
    run_two(tmp_path / "draws_ddp.py", tmp_path, env={**env, "BATCH_SIZE": "8"})
    drawn = [(tmp_path / f"draws_{rank}.txt").read_text().splitlines() for rank in (0, 1)]
    assert len(drawn[0]) == len(drawn[1]) >= before + 4, drawn
    assert drawn[0][:before] == drawn[1][:before], drawn
    assert all(a != b for a, b in zip(drawn[0][before:], drawn[1][before:], strict=True)), drawn


def test_a_loop_left_on_the_loss_is_left_at_the_same_step_by_every_rank(tmp_path: Path) -> None:
    """`if step_loss < 0.5: break` and `scheduler.step(step_loss)` (ReduceLROnPlateau) on
    the step's loss, every other sample noisy: the whole batch goes under 0.5 at epoch 13;
    rank 0's share alone (the clean samples) would at epoch 8, and its scheduler would
    lower the rate at another epoch than rank 1's from epoch 11 (computed by hand). Without
    the agreement rank 0 left first and rank 1 waited in DDP's all-reduce until stopped
    (seen by hand). Converted, both read the mean over the ranks: they leave at epoch 13,
    as the single process does, with its weights (so with its learning rates)."""
    script, said = convert_fixture(tmp_path, "agreed/loss_tests.py", "stop")
    assert "stop.py:41: agreed.exit" in said
    assert "stop.py:38: agreed.scheduler" in said, said
    single = run_single(script, tmp_path)
    assert "stopped at epoch 13" in single.stdout
    multi = run_two(tmp_path / "stop_ddp.py", tmp_path)
    assert "stopped at epoch 13" in multi.stdout, multi.stdout
    assert_same_checkpoint(tmp_path)


def test_the_best_weights_kept_on_the_training_loss_are_the_originals() -> None:
    """`if loss.item() < best: torch.save(...)` each epoch, then the best weights loaded at
    the end: the whole batch's loss is lowest at epoch 3, rank 0's share's at epoch 6
    (computed by hand), so rank 0, the one that saves, would keep other weights than the
    original (exit 0, the weights off by far more than 1e-5: seen without the mean)."""
    run = STEPS.result("best")
    said = converted_said(run)
    assert "best.py:19: agreed.kept" in said, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_stream_of_samples_is_dealt_out_by_rank_0() -> None:
    """A DataLoader over an IterableDataset of the script: no sampler can shard it (every
    rank would train on the whole stream; convert refused it, exit 4). Rank 0 reads the
    stream and deals the batches: the run is the original's (batch 64 against 32 per
    rank, two batches of the stream per step)."""
    run = STEPS.result("stream")
    said = converted_said(run)
    assert "stream.py:24: data.rank_batches: batches made by a DataLoader over `Stream`" in (
        said), said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_table_shuffled_split_and_folded_without_a_seed_is_rank_0s_on_every_rank(
        tmp_path: Path) -> None:
    """pandas' `df.sample(frac=1)`, scikit-learn's `train_test_split` and a `KFold(...,
    shuffle=True)`'s folds draw with numpy's generator: unseeded, each rank shuffles,
    splits and folds its own way (the projects' shim seeds rank 1 otherwise, as separate
    processes are), so the sampler shards tables that differ. Converted, every rank takes
    rank 0's draws: the original's training, fold by fold."""
    script, said = convert_fixture(tmp_path, "data/kfold_splits.py", "table")
    assert said.count("data.same_split") == 3, said
    env = {"PYTHONPATH": str(ROOT / "tests/projects/shim"), "DISTRUN_SHIM_SEED_BY_RANK": "1"}
    single = run_single(script, tmp_path, env=env)
    multi = run_two(tmp_path / "table_ddp.py", tmp_path, env=env)
    assert_same_checkpoint(tmp_path)
    assert multi.stdout.strip() == single.stdout.strip() != ""  # the same validation sets


def test_a_loader_read_through_a_progress_bar_in_a_name_moves_to_the_next_epoch(
        tmp_path: Path) -> None:
    """`pbar = tqdm(dataloader)` then `for i, (x, y) in enumerate(pbar):` (the conditional
    diffusion model's loop): the loader was not found behind the name, no set_epoch was
    placed, and launch --check said "[no-set-epoch] ... every epoch has the same order".
    Converted, the sampler moves on each epoch: the check finds nothing."""
    script, said = convert_fixture(tmp_path, "data/progress_bar_variable.py", "bar")
    assert "bar.py:10: data.set_epoch: `dataloader.sampler.set_epoch(epoch)`" in (
        said), said
    run_two(tmp_path / "bar_ddp.py", tmp_path)  # --check: [no-set-epoch] would fail it


def test_a_list_of_batches_made_by_hand_is_dealt_out() -> None:
    """`batches = [(x[i:i + size], y[i:i + size]) for i in ...]` then `for inputs,
    targets in batches:` (PyTorch's NLP tutorials train on such lists): every rank trained
    on every batch (convert refused it, "no DataLoader found", exit 4). Each rank now takes
    one of every WORLD_SIZE batches: with the batch size halved, the original's steps."""
    run = STEPS.result("listed")
    said = converted_said(run)
    assert "listed.py:13: data.rank_batches: batches made by `batches`" in said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_batch_class_named_like_a_loader_is_dealt_out_and_its_count_said() -> None:
    """A project's own loader class (`train_loader = SequenceLoader(...)`, batches made
    by hand, an optimizer step every 2 batches: sgrvinod's transformer tutorial) was both
    rebuilt as an unseen DataLoader (`shard_loader`, a TypeError on every rank at the
    start) and dealt out by `rank_batches`. Now only dealt out: the original's steps; and
    the step count made from its `n_batches` (all the batches) is reported."""
    run = STEPS.result("accum")
    said = converted_said(run)
    assert "accum.py:29: warning: `train_loader.n_batches` counts all the batches" in (
        said), said
    assert "shard_loader" not in (run.conv / "accum_ddp.py").read_text()
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_model_trained_through_a_container_is_averaged_by_hand() -> None:
    """The optimizer built from an `nn.ModuleList` of the student and its head, called as
    `modules[0]` in a function, a frozen teacher appended after (HobbitLong/RepDistiller's
    distillation): no forward pass to give a DDP object, so convert exited 4 ("no training
    forward pass ... found"), and with --partial each rank trained its own student with
    exit 0. Now rank 0's weights are broadcast and the gradients averaged by hand before
    every step: the original's training."""
    run = STEPS.result("distill")
    said = converted_said(run)
    assert "distill.py:31: model.hand_average: no training forward pass of `modules`" in (
        said), said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_model_store_save_is_rank_0s_and_its_result_every_rank_s(tmp_path: Path) -> None:
    """`saved = bentoml.pytorch.save_model("classifier", model, ...)` (BentoML's MNIST
    example, kfold_bentoml_mnist): not taken for a save, every rank wrote the store
    (`launch --check`: [shared-write], exit 3). Now rank 0 saves through `rank0_call`
    and every rank gets its result. BentoML is the project shim's stand-in, which logs
    the rank of each save."""
    script, said = convert_fixture(tmp_path, "checkpoint/model_store_save.py", "store")
    assert "store.py:20: checkpoint.rank0_save: `bentoml.pytorch.save_model` on rank 0" in (
        said), said
    env = {"PYTHONPATH": str(ROOT / "tests/projects/kfold_bentoml_mnist/shim")}
    run_single(script, tmp_path, env=env)
    (tmp_path / "bentoml_store/saves.log").unlink()
    run_two(tmp_path / "store_ddp.py", tmp_path, env=env)
    assert_same_checkpoint(tmp_path)
    assert (tmp_path / "bentoml_store/saves.log").read_text().split() == ["0"]


def test_batches_cut_by_hand_are_split_among_the_ranks() -> None:
    """`for i in range(0, n, batch_size): idx = permutation[i:i + batch_size]` with
    `permutation = torch.randperm(n)` drawn each epoch (STGCN), then contiguous slices
    `x = inputs[i:i + bs]`: no DataLoader, so convert exited 4 ("no DataLoader found"),
    and with --partial every rank trained on every batch. Now the ranks split each batch
    (`rank_slice`) of one permutation (rank 0's): the original's steps, to 1e-5."""
    run = STEPS.result("slices")
    said = converted_said(run)
    assert said.count("data.rank_slices") == 3, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_schedule_counted_from_the_dataset_spans_the_rank_s_steps() -> None:
    """`steps_per_epoch = len(train_dataset) // batch_size` given to OneCycleLR: with the
    dataset sharded, each rank takes 1/WORLD_SIZE of those steps, so the cycle was
    stretched (the weights 0.05 off, exit 0, and nothing said). The count is now this
    rank's share of the dataset: the original's learning rates, step by step."""
    run = STEPS.result("cycle")
    said = converted_said(run)
    assert "cycle.py:14: data.schedule_share: `len(train_dataset)`" in said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_model_handed_on_through_two_functions_is_wrapped() -> None:
    """`fit(model)` hands the model to `train_epoch(model)`, which calls it (the generic
    trainer of adambielski/siamese-triplet): the DDP object was passed only one level up,
    so no DDP object was made at all, convert said nothing and each rank trained its own
    model with exit 0 (`launch --check`: [params-diverged]). Now `fit()` gets `ddp_model`,
    its save reaches `model.module`: the original's training and keys."""
    run = STEPS.result("chain")
    said = converted_said(run)
    assert "chain.py:32: model.pass_wrapper: `fit()` trains the model it is given" in (
        said), said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_trainer_given_loaders_of_two_kinds_moves_each_to_its_next_epoch() -> None:
    """A generic `fit(train_loader, ...)` given a plain loader (now with a
    DistributedSampler) and then a loader with its own batch sampler: the
    `train_loader.sampler.set_epoch(epoch)` placed in fit() met the second loader's
    SequentialSampler, an AttributeError on every rank (adambielski/siamese-triplet's
    fourth experiment). Now it is called where the sampler has one: both trainings are
    the original's."""
    run = STEPS.result("fit")
    said = converted_said(run)
    assert "(where its sampler has one" in said, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_endless_passes_of_a_generator_move_the_sampler_on(tmp_path: Path) -> None:
    """`def infiniteloop(dataloader): while True: for x, y in iter(dataloader): yield ...`
    read with `next()` in the step loop (pytorch-ddpm): no set_epoch was placed, every
    pass had the same order (`launch --check`: [no-set-epoch], exit 3). Now each pass of
    the `while` moves the sampler to its next epoch; the check finds nothing."""
    script, said = convert_fixture(tmp_path, "data/endless_passes.py", "loop")
    assert "loop.py:11: data.set_epoch: `dataloader.sampler.set_epoch(" in said
    assert "measured_on_shard" not in said  # it feeds, it measures nothing
    run_single(script, tmp_path)
    run_two(tmp_path / "loop_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)


def test_a_repository_laid_out_like_agcrn_converts_whole_and_trains_as_one(
        tmp_path: Path) -> None:
    """LeiBAI/AGCRN's layout: the entry in model/ puts the repository's root on sys.path
    through a name (`file_dir = os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))`), one DataLoader helper makes every split (returned as a tuple), an
    optimizer factory nothing calls, a Trainer that sets `self.model, self.optimizer = ...`
    in one line and logs through `get_logger()` to a FileHandler with mode='w', early
    stopping on the validation loss. On arrival convert read the entry alone and exited 4;
    then it left the training loader whole and every rank wrote run.log. Now the whole
    project converts, the helper's training loader is rebuilt sharded, the logger is rank
    0's: the original's training, run.log written once (`launch --check`)."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "project/repo_layout_trainer/in", project)
    converted = distrun("convert", "model/run.py", cwd=project)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "model/run.py:16: data.rebuild_loader: `train_loader`" in converted.stdout
    run_single(project / "model/run.py", tmp_path)
    run_two(tmp_path / "project_ddp/model/run.py", tmp_path)
    assert_same_checkpoint(tmp_path)


def test_helpers_shared_by_training_and_evaluation_get_the_ddp_object_once(
        tmp_path: Path) -> None:
    """rasbt/LLMs-from-scratch's helpers: `calc_loss_batch(model, ...)` (the forward)
    serves the training loop and, through `evaluate_model` -> `calc_loss_loader`, the
    evaluation, in another module; the entry also prints `calc_loss_loader(val_loader,
    model)` before training. Each function of the chain was unwrapped before the next was
    known (`model.module` of the plain model: AttributeError in the notebook's form), and
    the print, its argument rewritten to the DDP object, was left on every rank
    (`launch --check`: [duplicate-output]). Now the chain hands the DDP object on as it
    is, the value is computed on every rank and printed by rank 0: the original's run."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "project/helper_chain_shared/in", project)
    converted = distrun("convert", "main.py", cwd=project)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "module" not in (tmp_path / "project_ddp/helpers.py").read_text()
    single = run_single(project / "main.py", tmp_path)
    multi = run_two(tmp_path / "project_ddp/main.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert multi.stdout.strip() == single.stdout.strip() != ""


def test_data_drawn_when_the_data_set_is_built_is_rank_0s_and_its_alias_reshuffled(
        tmp_path: Path) -> None:
    """mazzamani/LSTM_pytorch's form: a Dataset that draws its samples in `__init__`
    with numpy's unseeded generator, built through an alias (`Data = SequenceDataset`),
    and one `update(mode)` for every phase whose loop reads `load = train_loader`. Each
    rank built other data, silently (the shim seeds rank 1 otherwise, as separate
    processes are), and no set_epoch was placed (`launch --check`: [no-set-epoch]). Now
    rank 0 builds the data sets and sends them, and the sampler moves on after the alias:
    the original's training."""
    script, said = convert_fixture(tmp_path, "data/dataset_drawn_in_init.py", "seq")
    assert said.count("`SequenceDataset.__init__` draws its samples") == 2
    env = {"PYTHONPATH": str(ROOT / "tests/projects/shim"), "DISTRUN_SHIM_SEED_BY_RANK": "1"}
    single = run_single(script, tmp_path, env=env)
    multi = run_two(tmp_path / "seq_ddp.py", tmp_path, env=env)
    assert_same_checkpoint(tmp_path)
    assert multi.stdout.strip() == single.stdout.strip() != ""  # the same validation set


def test_a_second_backward_through_a_kept_graph_is_averaged(tmp_path: Path) -> None:
    """The simple GAN's `loss_disc.backward(retain_graph=True)` through the generator's
    undetached output, then `loss_gen.backward()` through the same graph: DDP averaged
    the generator's gradients at the first only. Seen by hand without the average: the
    check's "[params-diverged] after optimizer step 1 of optimizer 2" (masked while every
    rank drew the same noise). Converted, `launch --check` compares the ranks' weights
    after every step: no problem."""
    script, said = convert_fixture(tmp_path, "retained_graph/gan_retained.py", "gan")
    assert "gan.py:34: retained_graph.average" in said, said
    run_two(tmp_path / "gan_ddp.py", tmp_path)  # --check: any divergence fails it


# `random.randint` logged by rank, the module patched at start-up (the scripts unedited).
RANDINT_LOG = '''\
import os
import random

_draw = random.randint


def _logged(a, b):
    drawn = _draw(a, b)
    with open(os.path.join(os.environ["DRAWS_DIR"], f"draws_{os.environ.get('RANK', '0')}.txt"),
              "a") as log:
        log.write(f"{drawn}\\n")
    return drawn


random.randint = _logged
'''


def test_draws_from_a_module_reached_through_a_star_import_are_each_rank_s_own(
        tmp_path: Path) -> None:
    """char-rnn.pytorch's chunks: `random.randint` at every step, `random` bound in
    train.py only by `from helpers import *`. Converted, the generator is reseeded by rank
    (seeded alike, not reseeded, both ranks drew the same chunks: seen on arrival)."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "project/star_imported_draws/in", project)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(RANDINT_LOG)
    converted = distrun("convert", "train.py", cwd=project)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "data.random_draws: each step draws its samples at random (`random.randint" in (
        converted.stdout), converted.stdout
    env = {"PYTHONPATH": f"{shim}{os.pathsep}{tmp_path / 'project_ddp'}",
           "DRAWS_DIR": str(tmp_path), "BATCH_SIZE": "4", "OUT_PATH": str(tmp_path / "m.pt")}
    run_two(tmp_path / "project_ddp" / "train.py", tmp_path / "project_ddp", env=env)
    drawn = [(tmp_path / f"draws_{rank}.txt").read_text().split() for rank in (0, 1)]
    assert len(drawn[0]) == len(drawn[1]) == 16, drawn
    assert drawn[0] != drawn[1], drawn


# Every draw of `torch.randint` whose values reach the script, logged by rank.
TORCH_RANDINT_LOG = '''\
import os

import torch

_draw = torch.randint


def _logged(*args, **kwargs):
    drawn = _draw(*args, **kwargs)
    if drawn.dim() == 1:  # a step's timesteps (the reseed's own 0-dim draw aside)
        path = os.path.join(os.environ["DRAWS_DIR"], f"draws_{os.environ.get('RANK', '0')}.txt")
        with open(path, "a") as log:
            log.write(f"{drawn.tolist()}\\n")
    return drawn


torch.randint = _logged
'''


def test_noise_drawn_in_a_method_of_a_project_object_is_each_rank_s_own(tmp_path: Path) -> None:
    """A diffusion model's `t = diffusion.sample_timesteps(n)` (torch.randint inside a
    method of a plain class of the script), fed to the training forward: torch's generator
    starts alike on every rank, so every rank drew the same timesteps for its own images
    (seen in the eighth round's ddpm_conditional). Converted, it is reseeded by rank."""
    script = tmp_path / "diffusion.py"
    script.write_text((FIXTURES / "data/noise_in_a_method.py").read_text())
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(TORCH_RANDINT_LOG)
    converted = distrun("convert", "diffusion.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "data.random_draws: each step draws values for the model " \
        "(`diffusion.sample_timesteps(...)`" in converted.stdout, converted.stdout
    run_two(tmp_path / "diffusion_ddp.py", tmp_path,
            env={"PYTHONPATH": str(shim), "DRAWS_DIR": str(tmp_path)})
    drawn = [(tmp_path / f"draws_{rank}.txt").read_text().splitlines() for rank in (0, 1)]
    assert len(drawn[0]) == len(drawn[1]) == 2, drawn  # 2 epochs of one step each
    assert all(a != b for a, b in zip(drawn[0], drawn[1], strict=True)), drawn


def test_training_metrics_read_after_the_loop_are_the_whole_batch_s(tmp_path: Path) -> None:
    """`train_loss += loss.item()`, `correct += ....sum().item()`, `total +=
    targets.size(0)` returned after the loop (kuangliu's CIFAR trainer), and a sum of
    per-sample losses with tensor counts printed after it: each rank summed its own half,
    so rank 0 printed and returned its half's loss and accuracy as the training's (exit 0,
    nothing said). All-reduced after the loop, each the way its terms add up, the printed
    values are the original's."""
    script, said = convert_fixture(tmp_path, "data/train_metrics.py", "metrics")
    assert said.count("data.train_metrics:") == 2, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "metrics_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 6)


def assert_same_metrics(single: subprocess.CompletedProcess[str],
                        two: subprocess.CompletedProcess[str], count: int) -> None:
    """The `metrics ...` lines the original printed, `count` of them, printed again by the
    converted run (rank 0), each number to 1e-5."""
    expected, got = _metrics(single.stdout), _metrics(two.stdout + two.stderr)
    assert len(expected) == count and len(got) == count, (expected, got)
    for want, have in zip(expected, got, strict=True):
        assert have == pytest.approx(want, rel=1e-5), (expected, got)


def _metrics(output: str) -> list[list[float]]:
    """The numbers of each `metrics ...` line, in order (the epoch's number dropped)."""
    lines = [line[line.index("metrics"):] for line in output.splitlines() if "metrics " in line]
    return [[float(x) for x in re.findall(r"-?\d+\.?\d*", line)[1:]] for line in lines]


def test_a_helper_of_every_split_handed_on_by_a_method_shards_training_only(
        tmp_path: Path) -> None:
    """`data_provider(flag)` builds the loader of every split, and the experiment's
    `_get_data(flag)` hands its result on (LTSF-Linear): the names were followed one caller
    up only, so the helper's DataLoader was "the script's only one", sharded for every
    split, and `train_loader` rebuilt as well: both ranks stopped at the first step
    ("this DataLoader has a sampler of its own"). Now only training is sharded, once; the
    validation losses printed and the weights are the original's."""
    script, said = convert_fixture(tmp_path, "data/helper_of_every_split.py", "split")
    assert "data.mixed_helper" in said and said.count("data.rebuild_loader") == 1, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "split_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    expected, got = _metrics(single.stdout), _metrics(two.stdout + two.stderr)
    assert len(expected) == 3 and len(got) == 3, (expected, got)
    assert sum(expected, []) == pytest.approx(sum(got, []), rel=1e-5), (expected, got)


def test_episodes_grouped_by_class_are_dealt_out_whole(tmp_path: Path) -> None:
    """A batch sampler of the project built from the labels (few-shot episodes, the
    project's own class) with a loss over the episode's classes (prototypes, then the
    queries' distances to them): its batches were cut in contiguous halves, so each rank
    held half the classes, another task (it crashed protonet: "stack expects each tensor
    to be equal size"; this loss asserts all its classes). Each rank now takes whole
    episodes of rank 0's: the run trains in step (launch --check: every rank steps, the
    weights stay equal)."""
    _, said = convert_fixture(tmp_path, "data/episodes_by_class.py", "episodes")
    assert "episodes.py:44: data.whole_batches" in said, said
    two = run_two(tmp_path / "episodes_ddp.py", tmp_path)
    assert "6 optimizer steps on 2 ranks" in two.stderr, two.stderr


def test_class_batches_with_a_loss_over_the_batch_are_split_and_gathered() -> None:
    """P classes x K samples with a batch-hard triplet loss (`torch.cdist(emb, emb)`):
    the loss is gathered from every rank (batch_loss.gather), so the split batch is whole
    again where the loss reads it: the original's loss and steps, to 1e-5."""
    run = STEPS.result("pk")
    said = converted_said(run)
    assert "data.share_batch_sampler" in said and "batch_loss.gather" in said, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_batchnorm_statistics_updated_after_swa_cover_the_whole_set(tmp_path: Path) -> None:
    """`update_bn(train_loader, swa_model)` on the sharded loader gave each rank its own
    half's BatchNorm statistics, and rank 0 saved its half's (exit 0, nothing said). It is
    given the loader's whole dataset now: the saved statistics are those of the whole
    training set, recomputed here from the saved weights."""
    _, said = convert_fixture(tmp_path, "data/swa_update_bn.py", "swa")
    assert "swa.py:23: data.measured_on_shard" in said, said
    run_two(tmp_path / "swa_ddp.py", tmp_path)
    saved = torch.load(tmp_path / "multi.pt")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.ReLU(), torch.nn.Linear(16, 3))
    model.load_state_dict(saved)
    torch.manual_seed(0)  # the fixture's data, drawn first after its seed
    data = torch.utils.data.TensorDataset(torch.randn(64, 8) * 3 + 1, torch.zeros(64))
    torch.optim.swa_utils.update_bn(torch.utils.data.DataLoader(data, batch_size=32), model)
    for key in ("1.running_mean", "1.running_var"):
        torch.testing.assert_close(saved[key], model.state_dict()[key], msg=key)


def test_a_dataloader_subclass_rebuilt_keeps_its_attributes() -> None:
    """A DataLoader subclass of the project (it keeps the MEAN/STD its trainer reads:
    yassouali/pytorch-segmentation) rebuilt by `shard_loader` came back a plain DataLoader:
    "AttributeError: 'DataLoader' object has no attribute 'MEAN'" on both ranks. And an
    imported module's `__main__` demo (an optimizer over a model it never calls) made
    convert exit 4 (model.no_forward). The rebuilt loader is of the project's class now,
    with its attributes, and the demo is not training: the original's weights, to 1e-5."""
    run = STEPS.result("subclass")  # orig/ and conv/: copies of the project
    converted = run.convert
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "data.rebuild_loader" in converted.stdout, converted.stdout
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_metrics_kept_in_average_meters_are_the_whole_batch_s(tmp_path: Path) -> None:
    """`losses.update(loss.item(), images.size(0))` into AverageMeter objects, by name and
    in a dict, their `.avg` and `.sum` returned (pytorch/examples' imagenet, and the
    repositories after it: pytorch-nested-unet's log.csv): each rank's meters held its
    share, rank 0's was printed. Their sums and counts are all-reduced after the loop:
    the printed values are the original's."""
    script, said = convert_fixture(tmp_path, "data/meters.py", "meters")
    assert "the meters losses" in said and "the meters meters" in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "meters_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    expected, got = _metrics(single.stdout), _metrics(two.stdout + two.stderr)
    assert len(expected) == 3 and len(got) == 3, (expected, got)
    assert sum(expected, []) == pytest.approx(sum(got, []), rel=1e-5), (expected, got)


def test_two_loaders_zipped_are_both_sharded() -> None:
    """`for (x, y), (u, _) in zip(cycle(labelled), unlabelled)` (semi-supervised training),
    each loader given a SubsetRandomSampler made by a helper function: only zip's first
    argument was followed and `cycle` stopped it, so neither loader was known to train
    (convert exit 4, data.unknown_loader), and the samplers made by a helper were not
    followed either (data.own_sampler). Both are shared out now: the original's steps."""
    run = STEPS.result("zipped")
    said = converted_said(run)
    assert said.count("data.share_sampler") == 2, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_batches_drawn_through_a_generator_in_a_step_loop_are_sharded_and_summed(
        tmp_path: Path) -> None:
    """`batches = zip(loop_iterable(a), loop_iterable(b))` then `next(batches)` in `for _ in
    range(steps)` (pytorch-domain-adaptation's WDGRL), and `self.batches = endless(loader)`
    drawn in a `step()` method a step loop calls: the loaders were sharded only because they
    shuffle (or not at all), and the loss summed over the steps and printed after them was
    rank 0's half. The generators are followed now: each loader is sharded as drawn for
    training (its sampler moved on at each pass), the sum all-reduced after the step loop,
    and what is printed is the original's. (The second form, data/step_loop_endless, is
    proven by its fixture: the same two rewrites.)"""
    script, said = convert_fixture(tmp_path, "data/step_loop_generators.py", "steps")
    assert "data.train_metrics:" in said and "`AutoEpochSampler(" in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "steps_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 2)


def test_a_loader_made_anew_each_epoch_reshuffles_and_its_steps_are_the_rank_s(
        tmp_path: Path) -> None:
    """A training loader made anew at every epoch (inline in `iter(...)`, with the steps
    per epoch counted from `len(dataset)`, as RetinaFace's trainer; or in the `for`
    statement): each epoch's new DistributedSampler started at epoch 0, the same order
    and shares every epoch (silent), and the steps still counted the whole dataset, so
    `next()` ran past the rank's share (StopIteration on every rank). Each new sampler
    now goes on from the last one's epoch, the count is the rank's share, and the run is
    the original's. (The loader made in the `for` statement, data/loader_made_in_the_loop,
    is proven by its fixture: the same sampler.)"""
    script, said = convert_fixture(tmp_path, "data/loader_made_each_epoch.py", "again")
    assert 'again="__main__:' in said, said
    run_single(script, tmp_path)
    two = run_two(tmp_path / "again_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    orders = [line.split(" ", 2)[2] for line in (two.stdout + two.stderr).splitlines()
              if line.startswith("order ")]
    assert len(orders) == 3 and len(set(orders)) == 3, orders


def test_predictions_collected_over_training_are_every_rank_s(tmp_path: Path) -> None:
    """Predictions and labels collected into lists over the training loop (`preds +=
    out.argmax(1).cpu()`, `.extend(y.tolist())`, tensors appended and concatenated), an
    accuracy computed from them after it: each rank held its own half, and rank 0 printed
    its half's accuracy as the training's (exit 0, nothing said). Gathered from every rank
    after the loop, the printed accuracy and mean are the original's, over all 64."""
    script, said = convert_fixture(tmp_path, "data/train_predictions.py", "preds")
    assert "(every rank's items, rank by rank)" in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "preds_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 3)


def test_a_loss_divided_by_a_count_over_the_batch_is_the_original_s() -> None:
    """A loss summed over what a mask keeps and divided by how many it keeps (SSD's and
    RetinaFace's matched anchors, a padding mask): each rank divided by its own count and
    DDP averaged the ratios, not the single process's step (silent). The count is averaged
    over the ranks now: the run is the original's to 1e-5."""
    run = STEPS.result("count")
    said = converted_said(run)
    assert said.count("loss.count_divisor") == 2, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_losses_summed_over_the_batch_by_sum_keep_the_step_and_the_penalty(
        tmp_path: Path) -> None:
    """A BPR loss `-F.logsigmoid(pred).sum()` plus an L2 penalty on the weights, reached
    through an attribute of the model (`self.loss = bpr_loss`), and a KL term
    `torch.sum(...)` over the batch: each rank summed half the batch and DDP averaged,
    every step half the original's (silent); scaling the backward would double the
    penalty. Each batch sum is scaled while it is differentiated: the weights are the
    original's to 1e-5, and the validation under no_grad prints the original's loss."""
    script, said = convert_fixture(tmp_path, "loss/sums_by_method.py", "sums")
    assert said.count("loss.batch_sum") == 1 and "F.logsigmoid(pred).sum()" in said, said
    assert "p.pow(2).sum()" not in said, said  # the penalty: no sum over the batch
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "sums_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 3)


def test_a_static_training_step_and_a_model_module_loaded_by_name() -> None:
    """RotatE's `kge_model.train_step(kge_model, optimizer, ...)`, a @staticmethod whose
    first parameter was taken for `self` (the model never found: exit 4), and
    bohyunshin/recommender's model class chosen by name through importlib, whose module
    was never read (its loss, a sum over the batch, left at half the step, silently).
    The static step gets the DDP object, the module named in a string is converted with
    the project, its sum scaled: the original's weights to 1e-5."""
    run = STEPS.result("static")
    converted = run.convert
    assert converted.returncode == 0, converted.stdout + converted.stderr
    said = converted.stdout
    assert "model.pass_wrapper" in said and "(models/ranker.py:13)" in said, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_progress_bar_whose_count_is_read_and_a_namesake_loader(tmp_path: Path) -> None:
    """`total / pbar.n` after a validation bar (pytorch-flows): the bar disabled on rank 1
    counted nothing, ZeroDivisionError there; an inference loader in a function that never
    trains, named like the training loop's parameter (voice100's `predict()`), was sharded
    as training, its mean printed over half the set. The bar counts on every rank (to the
    null device beside rank 0), the loader is left whole: the original's weights and
    printed values."""
    script, said = convert_fixture(tmp_path, "output/bar_count_read.py", "bars")
    assert said.count("goes on counting") == 2 and "bars.py:33: data.sampler" not in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "bars_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 4)


def test_task_weights_with_an_optimizer_of_their_own_stay_the_same_on_every_rank(
        tmp_path: Path) -> None:
    """Learned task weights (`log_vars`, uncertainty weighting; GradNorm's weights),
    tensors of the script's own stepped by `Adam([log_vars])` beside the model's
    optimizer: each rank stepped them from its own share, apart, silently; and their
    weighted sum over the tasks was taken for a sum over the batch. Their gradients are
    averaged by hand, the task sum left: the original's weights and task weights."""
    script, said = convert_fixture(tmp_path, "model/free_task_weights.py", "tasks")
    assert "model.free_tensors" in said and "loss.batch_sum" not in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "tasks_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 4)


def test_a_memory_bank_of_past_embeddings_holds_every_rank_s() -> None:
    """A memory of past keys kept across steps and scored against by the loss (a memory
    bank; MoCo's queue): each rank's held its own share's keys only, fewer negatives,
    other weights (silent). The new keys are gathered from every rank before they are
    added: the original's weights to 1e-5."""
    run = STEPS.result("bank")
    said = converted_said(run)
    assert "batch_loss.memory" in said and "similarity of two batches" not in said, said
    single = run.assert_single_ran()  # batch 32
    run.assert_two_ran()  # 16 per rank
    assert_same_checkpoint(run.folder)
    assert "metrics 3 128" in single.stdout


def test_a_function_named_cuda_and_a_data_link_of_the_project(tmp_path: Path) -> None:
    """`utils.cuda([x, y])`, a function of the project, was taken for the tensor method
    and became `utils.to(DEVICE)` (AttributeError on both ranks at the first step), and
    the symbolic link the data is read through, made again at each start after
    `os.remove`, was made by every rank (FileExistsError on one of them, by timing). The
    function is left as it is; rank 0 makes the link and every rank waits for it; the
    run is the original's."""
    given = FIXTURES / "project/module_cuda_and_links/in"
    torch.manual_seed(0)
    data = (torch.randn(64, 4), torch.randn(64, 1))
    for side in ("orig", "conv"):
        shutil.copytree(given, tmp_path / side)
        (tmp_path / side / "data/raw").mkdir(parents=True)
        torch.save(data, tmp_path / side / "data/raw/data.pt")
    run_single(tmp_path / "orig/train.py", tmp_path / "orig")
    shutil.copy(tmp_path / "orig/single.pt", tmp_path / "conv/single.pt")
    converted = distrun("convert", "train.py", "--in-place", "--no-backup",
                        cwd=tmp_path / "conv")
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "file_ops.link_barrier" in converted.stdout, converted.stdout
    assert "utils.cuda([xb, yb])" in (tmp_path / "conv/train.py").read_text()
    run_two(tmp_path / "conv/train.py", tmp_path / "conv")
    assert_same_checkpoint(tmp_path / "conv")


def test_negatives_drawn_when_the_data_set_is_built_and_a_trainer_s_alias(
        tmp_path: Path) -> None:
    """changhyeonnam/NCF's form: negatives drawn with `np.random.choice` (never seeded)
    by a method the Dataset's constructor calls, and a trainer class that keeps its loader
    (`self.epochs, self.dataloader = epochs, dataloader`) and binds it to a local name
    before the epoch loop. Each rank built other negatives, silently, and the sampler's
    epoch was never moved on (its one set_epoch, if any, ran once before the epochs). Now
    rank 0 builds the data set and sends it, and the sampler moves on at each epoch: the
    original's training, and a new order every epoch."""
    script, said = convert_fixture(tmp_path, "data/negatives_drawn_in_init.py", "neg")
    assert "`Interactions.__init__` draws its samples" in said, said
    assert "`dataloader.sampler.set_epoch(epoch)`" in said, said
    env = {"PYTHONPATH": str(ROOT / "tests/projects/shim"), "DISTRUN_SHIM_SEED_BY_RANK": "1"}
    single = run_single(script, tmp_path, env=env)
    multi = run_two(tmp_path / "neg_ddp.py", tmp_path, env=env)
    assert_same_checkpoint(tmp_path)
    labels = [line for line in single.stdout.splitlines() if line.startswith("labels")]
    assert labels and labels[0] in multi.stdout, (single.stdout, multi.stdout)
    firsts = [line for line in multi.stdout.splitlines() if line.startswith("first")]
    assert len(firsts) == 3 and len({f.split(" ", 2)[2] for f in firsts}) == 3, firsts


def test_a_model_trained_through_a_method_of_its_own_is_averaged() -> None:
    """`model.triplet(u, pos, neg)`, a method that runs the model's forward twice, trains
    it at some steps and `model(u, i)` at others: DDP averaged only the latter, so the
    ranks drifted apart from the first triplet step (launch --check: params-diverged).
    Its gradients are now also averaged by hand before each step: the original's."""
    run = STEPS.result("side")
    said = converted_said(run)
    assert "`model.triplet(...)` (line 33) trains `model` through a method" in said, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_class_that_downloads_when_told_to_does_not_hang(tmp_path: Path) -> None:
    """`Download("data", download=True)`, a class of the project whose constructor
    fetches by hand (changhyeonnam/NCF): the `download=` keyword made the call rank 0's
    first (barriers around it) while the fetch inside became `rank0_call(...)` (rank 0
    waiting in a broadcast the others never reach): both ranks hung at once. One transform
    takes it now; the run (the archive fetched from a file:// address) is the original's."""
    import zipfile

    torch.manual_seed(1)
    torch.save((torch.randn(64, 4), torch.randn(64, 1)), tmp_path / "ratings.pt")
    with zipfile.ZipFile(tmp_path / "ml.zip", "w") as archive:
        archive.write(tmp_path / "ratings.pt", "ratings.pt")
    script, said = convert_fixture(tmp_path, "download/class_with_download_keyword.py", "dl")
    assert "download.rank0_call" in said and "download.rank0_first" not in said, said
    env = {"DATA_URL": (tmp_path / "ml.zip").as_uri()}
    run_single(script, tmp_path, env=env)
    shutil.rmtree(tmp_path / "data")
    run_two(tmp_path / "dl_ddp.py", tmp_path, env=env)
    assert_same_checkpoint(tmp_path)


def test_a_meta_learner_whose_forward_trains_gets_its_loader_sharded() -> None:
    """A meta-learner module whose forward runs the whole step (its network's forward,
    backward, its own optimizer's step: MAML-Pytorch's Meta), the loop only calling
    `meta(x, y)`: the loader was taken for a statistics pass (no optimizer stepped in the
    loop's function) and left whole, each rank training on all the tasks. It is a training
    loader now: sharded, the original's steps."""
    run = STEPS.result("meta")
    said = converted_said(run)
    assert "data.sampler" in said and "data.statistics_pass" not in said, said
    run.assert_single_ran()
    run.assert_two_ran()
    assert_same_checkpoint(run.folder)


def test_a_file_written_through_a_parameter_is_rank_0s_whatever_other_functions_read(
        tmp_path: Path) -> None:
    """`np.savetxt(file_path, ...)` in `save_loss(losses, file_path)`, while another
    function reads its own `file_path` parameter (`load_json_file`): the paths were matched
    by their text, the write taken for one read back and left on every rank (launch
    --check: [shared-write], exit 3: jidasheng/bi-lstm-crf's loss.csv). A local name is one
    file in its own function only: the write is rank 0's, and the run clean."""
    script, said = convert_fixture(tmp_path, "file_ops/read_back_other_function.py", "rb")
    assert "file_ops.rank0_write" in said and "file_ops.read_back" not in said, said
    run_single(script, tmp_path)
    run_two(tmp_path / "rb_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)


def test_folds_with_functions_defined_in_the_loop_and_one_loader_call_for_the_splits(
        tmp_path: Path) -> None:
    """bknyaz/graph_nn's cross-validation: per fold, one DataLoader call in `for split in
    ['train', 'test']` (shuffled for training only) and train()/test() defined in the fold's
    loop body. The functions were not found (only module-level defs were), so the DDP
    object was made after the training loop (NameError on both ranks), and the one loader
    call, "the script's only DataLoader", sharded the test split too (each rank scored its
    half). The wrap now precedes the epochs, the sampler is given where the split
    shuffles, and the run and the printed test losses are the original's."""
    script, said = convert_fixture(tmp_path, "data/folds_with_closures.py", "folds")
    assert 'if split == "train" else None)' in said, said
    single = run_single(script, tmp_path)
    two = run_two(tmp_path / "folds_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert_same_metrics(single, two, 2)
