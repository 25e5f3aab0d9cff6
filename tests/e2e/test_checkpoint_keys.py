"""A DataParallel script's checkpoints keep their format through the conversion (issue
25, class 13): the converted run on 2 processes writes the `module.` keys the original
wrote, so the original script's own resume loads it, and the converted script resumes
from a checkpoint of the original."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, distrun, run_cmd

pytestmark = pytest.mark.e2e
SCRIPT = ROOT / "tests" / "convert" / "fixtures" / "model" / "dataparallel_keys.py"


def test_the_original_resumes_from_the_converted_runs_checkpoint_and_back(tmp_path: Path) -> None:
    shutil.copy(SCRIPT, tmp_path / "train.py")
    converted = distrun("convert", "train.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    launched = distrun("launch", "--nproc-per-node", "2", "train_ddp.py", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    keys = sorted(torch.load(tmp_path / "last.pt"))
    assert keys and all(k.startswith("module.") for k in keys), keys
    resumed = run_cmd([sys.executable, "train.py"], cwd=tmp_path)  # the original's resume
    assert resumed.returncode == 0, resumed.stderr
    again = distrun("launch", "--nproc-per-node", "2", "train_ddp.py", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(torch.load(tmp_path / "last.pt")) == keys


def test_a_dataparallel_wrap_made_under_a_condition_keeps_the_keys_of_where_it_ran(
        tmp_path: Path) -> None:
    """kuangliu/pytorch-cifar's `if device == 'cuda': net = DataParallel(net)`: the original
    on this CPU saves plain keys, the converted run too (the `module.` prefix follows the
    condition, kept on a GPU machine), with the original's weights to 1e-5."""
    from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

    script = tmp_path / "cifar.py"
    shutil.copy(SCRIPT.with_name("dataparallel_keys_conditional.py"), script)
    converted = distrun("convert", "cifar.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "`net.distrun_dataparallel = True` marks where it happened" in converted.stdout
    run_single(script, tmp_path)
    run_two(tmp_path / "cifar_ddp.py", tmp_path)
    assert_same_checkpoint(tmp_path)  # the same keys (no `module.` here), the same weights


def test_a_save_under_an_option_in_the_main_guard_ends_cleanly(tmp_path: Path) -> None:
    """pytorch/examples' forward-forward saves under `if args.save_model:` at the end of
    its main guard: the barrier after that save stays in the guard, before the teardown
    (after the guard it ran with no process group left: "Default process group has not
    been initialized" on every rank)."""
    fixture = ROOT / "tests/convert/fixtures/checkpoint/save_under_an_option_in_the_main_guard.py"
    shutil.copy(fixture, tmp_path / "train.py")
    converted = distrun("convert", "train.py", cwd=tmp_path)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    launched = distrun("launch", "--nproc-per-node", "2", "train_ddp.py", "--save_model",
                       cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert sorted(torch.load(tmp_path / "model.pt")) == ["bias", "weight"]


def test_a_run_folder_named_by_the_clock_in_a_settings_module_is_rank_0s(tmp_path: Path) -> None:
    """pytorch-cifar100's form: `TIME_NOW = datetime.now()...` at the top of
    conf/global_settings.py names the run's checkpoint folder, and the end of the run loads
    the weights saved there. Each process takes the clock when it imports the settings:
    unconverted, rank 1 looked for the file in its own (empty) folder and failed after the
    whole training. Converted, every rank takes rank 0's value after the set-up."""
    from tests.e2e.test_corpus_equivalence import assert_same_checkpoint, run_single, run_two

    project = tmp_path / "project"
    shutil.copytree(ROOT / "tests/convert/fixtures/project/clock_in_settings/in", project)
    converted = distrun("convert", "train.py", cwd=project)
    assert converted.returncode == 0, converted.stdout + converted.stderr
    assert "conf/global_settings.py:8: rank0_values.imported" in converted.stdout
    run_single(project / "train.py", tmp_path)
    run_two(tmp_path / "project_ddp" / "train.py", tmp_path)
    assert_same_checkpoint(tmp_path)
    assert len(list((tmp_path / "checkpoint").iterdir())) == 2  # one for each run
