"""`distrun launch` checks on a corpus of broken distributed scripts, one defect each.

Each script of tests/check/scripts/ is launched on 2 CPU processes (gloo) with and without
`--check`: with it, exactly its defect's rule is named (exit code 3); without it, only the
rules that are always on can be named. `correct.py` must pass clean and train to the same
weights with `--check` as without.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from distrun.check.rules import RULES
from tests.conftest import ROOT, distrun

pytestmark = pytest.mark.e2e
SCRIPTS = Path(__file__).parent / "scripts"
DEFECTS = {  # script -> the rules its defect is named by
    "unconverted.py": ("no-process-group",),
    "no_sampler.py": ("unsharded-data",),
    "no_set_epoch.py": ("no-set-epoch",),
    "unwrapped_forward.py": ("params-diverged",),
    "hand_update.py": ("params-diverged",),  # no optimizer: steps between backward passes
    "twin_models.py": ("params-diverged",),  # two same-class models: names told apart
    "save_every_rank.py": ("shared-write",),
    "print_every_rank.py": ("duplicate-output",),
    "accelerate_no_prepare.py": ("unsharded-data",),
    "spawn_in_script.py": ("spawn-under-launcher", "no-training"),
    "split_per_rank.py": ("split-differs",),
    "table_per_rank.py": ("split-differs",),
    "fsdp_sharded_save.py": ("sharded-checkpoint",),
}
LOOK_ALIKES = {  # correct scripts that look like a defect: clean under the default check
    "spawn_when_alone.py": {},  # spawns only when no launcher started it
    "split_by_rank.py": {},  # Subsets that differ by rank on purpose, without overlap
    "fsdp_sharded_save.py": {"FULL_STATE": "1"},  # the full state dict gathered first
}


# Each broken script runs once (suite time): these under the default check (exit 0, the
# finding a warning), the others under --check (exit 3). Both modes judge with the same
# rules; one script of each kind of fact runs in each mode.
DEFAULT_SAMPLE = ["no_sampler.py", "split_per_rank.py", "spawn_in_script.py",
                  "fsdp_sharded_save.py", "unwrapped_forward.py"]


def launch(folder: Path, name: str, *options: str, env: dict[str, str] | None = None
           ) -> tuple[int, str, dict[str, object]]:
    """SCRIPT on 2 processes: exit code, stderr, and the --report-json record."""
    shutil.copy(SCRIPTS / name, folder / name)
    launcher = "accelerate" if name.startswith("accelerate") else "torchrun"
    report = folder / "report.json"
    result = distrun("launch", "--launcher", launcher, "--nproc-per-node", "2",
                     "--report-json", str(report), *options, name, cwd=folder,
                     env={"OUT_PATH": str(folder / "model.pt"), **(env or {})})
    assert report.is_file(), result.stdout + result.stderr
    return result.returncode, result.stderr, json.loads(report.read_text())


def rules_of(record: dict[str, object]) -> list[str]:
    return [str(f["rule"]) for f in record["findings"]]  # type: ignore[attr-defined]


def test_every_rule_has_a_broken_script_and_a_docs_entry() -> None:
    page = (ROOT / "docs" / "check.md").read_text()
    named = {rule for rules in DEFECTS.values() for rule in rules}
    # options-after-script: tests below; collective-mismatch: tests/launch/test_hangs.py
    assert named | {"options-after-script", "collective-mismatch"} == set(RULES)
    for rule in RULES:
        assert f"`[{rule}]`" in page, rule


@pytest.mark.parametrize(("name", "rules"), [(n, r) for n, r in DEFECTS.items()
                                              if n not in DEFAULT_SAMPLE])
def test_check_names_the_defect_and_nothing_else(tmp_path: Path, name: str,
                                                 rules: tuple[str, ...]) -> None:
    code, stderr, record = launch(tmp_path, name, "--check")
    assert rules_of(record) == list(rules), stderr[-3000:]
    assert code == 3 and record["exit_code"] == 3
    for rule in rules:
        assert f"distrun: check: [{rule}]" in stderr
        assert f"  fix: {RULES[rule].fix}" in stderr




@pytest.mark.parametrize(("name", "rules"), [(n, DEFECTS[n]) for n in DEFAULT_SAMPLE])
def test_the_default_check_names_it_in_the_first_steps_and_keeps_the_exit_code(
        tmp_path: Path, name: str, rules: tuple[str, ...]) -> None:
    """Every launch of 2 processes is checked in its first 8 steps; these jobs are
    shorter, so the defect shows, as a warning: the job's exit code stands."""
    code, stderr, record = launch(tmp_path, name)
    assert rules_of(record) == list(rules), stderr[-3000:]
    assert code == 0 and record["check"] == "window"
    for rule in rules:
        assert f"  fix: {RULES[rule].fix}" in stderr


@pytest.mark.parametrize(("name", "rules"), [
    ("no_sampler.py", []), ("spawn_in_script.py", ["spawn-under-launcher"])])
def test_no_check_leaves_only_the_rules_of_the_text_and_output(
        tmp_path: Path, name: str, rules: list[str]) -> None:
    code, stderr, record = launch(tmp_path, name, "--no-check")
    assert rules_of(record) == rules, stderr[-3000:]
    assert code == 0 and record["check"] == "off"
    assert ("distrun: warning: [" in stderr) == bool(rules)
    assert "distrun: check:" not in stderr


@pytest.mark.parametrize(("name", "env"), LOOK_ALIKES.items())
def test_look_alikes_stay_clean(tmp_path: Path, name: str, env: dict[str, str]) -> None:
    code, stderr, record = launch(tmp_path, name, env=env)
    assert (code, rules_of(record)) == (0, []), stderr[-3000:]
    assert "no problem found" in stderr


def test_parameters_updated_by_hand_are_compared_step_by_step(tmp_path: Path) -> None:
    """No optimizer (`p.data.add_(p.grad, alpha=-lr)` after backward): the steps are
    counted between backward passes and the weights compared after them (the defect's
    [params-diverged] in test_check_names_the_defect_and_nothing_else); synchronised by
    DDP, the job is clean and its steps are said (it was "0 optimizer steps")."""
    code, stderr, record = launch(tmp_path, "hand_update.py", "--check", env={"SYNCED": "1"})
    assert (code, rules_of(record)) == (0, []), stderr[-3000:]
    assert "distrun: check: 6 steps (parameters updated by hand) on 2 ranks, no problem " \
           "found" in stderr, stderr[-3000:]


def test_the_default_window_ends_after_8_steps_and_takes_its_hooks_out(
        tmp_path: Path) -> None:
    """A defect that starts at step 13 (the second epoch repeats the first's order) is
    past the default window: not named, and the probe's per-step hooks are gone by the
    end (torch's own DataLoader methods, no optimizer hook); --check names it."""
    shutil.copy(SCRIPTS / "long_no_set_epoch.py", tmp_path / "train.py")
    result = distrun("launch", "--nproc-per-node", "2", "--report-json", "report.json",
                     "train.py", cwd=tmp_path, env={"OUT_PATH": str(tmp_path / "model.pt")})
    record = json.loads((tmp_path / "report.json").read_text())
    assert (result.returncode, rules_of(record), record["window"]) == (0, [], 8), (
        result.stderr[-3000:])
    assert ("distrun: check: the first 8 optimizer steps on 2 ranks, no problem found; the "
            "rest ran unchecked") in result.stderr
    assert "optimizer hooks: []" in result.stdout
    assert "loader methods: torch.utils.data.dataloader torch.utils.data.dataloader" in (
        result.stdout)
    code, stderr, record = launch(tmp_path, "long_no_set_epoch.py", "--check")
    assert (code, rules_of(record)) == (3, ["no-set-epoch"]), stderr[-3000:]


def test_correct_script_passes_clean_and_trains_the_same(tmp_path: Path) -> None:
    code, stderr, record = launch(tmp_path, "correct.py")
    assert code == 0 and rules_of(record) == []
    plain = torch.load(tmp_path / "model.pt")
    code, stderr, record = launch(tmp_path, "correct.py", "--check")
    assert code == 0 and rules_of(record) == [], stderr[-3000:]
    assert record["optimizer_steps"] == 6  # 3 epochs of 2 batches of 16 per rank
    assert "distrun: check: 6 optimizer steps on 2 ranks, no problem found" in stderr
    checked = torch.load(tmp_path / "model.pt")
    assert checked.keys() == plain.keys()
    for key in plain:
        assert torch.equal(checked[key], plain[key]), key


def test_correct_script_under_accelerate_launch_and_as_a_module(tmp_path: Path) -> None:
    shutil.copy(SCRIPTS / "correct.py", tmp_path / "correct.py")
    for launcher, target in (("accelerate", ["correct.py"]), ("torchrun", ["-m", "correct"])):
        result = distrun("launch", "--launcher", launcher, "--nproc-per-node", "2", "--check",
                         *target, cwd=tmp_path, env={"OUT_PATH": str(tmp_path / "m.pt")})
        assert result.returncode == 0, result.stderr[-3000:]
        assert "no problem found" in result.stderr


def test_check_steps_ends_the_job_after_k_steps_and_finds_a_defect_at_step_1(
        tmp_path: Path) -> None:
    code, stderr, record = launch(tmp_path, "correct.py", "--check-steps", "2")
    assert (code, rules_of(record), record["optimizer_steps"]) == (0, [], 2), stderr[-3000:]
    assert not (tmp_path / "model.pt").exists()  # ended before the end of training
    code, stderr, record = launch(tmp_path, "unwrapped_forward.py", "--check-steps", "1")
    assert (code, rules_of(record)) == (3, ["params-diverged"]), stderr[-3000:]
    assert "after optimizer step 1, `weight` differs between rank 0 and rank 1" in stderr


def test_one_rank_on_the_node_is_said_to_be_compared_with_nothing(tmp_path: Path) -> None:
    """A node running one process (a world of one, or one process on each of several
    nodes) has no ranks to compare: no all-clear is given for checks that did not run."""
    shutil.copy(SCRIPTS / "unwrapped_forward.py", tmp_path / "train.py")
    report = tmp_path / "report.json"
    result = distrun("launch", "--nproc-per-node", "1", "--check", "--report-json",
                     str(report), "train.py", cwd=tmp_path,
                     env={"OUT_PATH": str(tmp_path / "model.pt")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nothing compared, the checks compare the ranks of a node" in result.stderr
    assert "no problem found" not in result.stderr
    record = json.loads(report.read_text())
    # what one rank shows alone is still checked
    assert record["checks_run"] == [*(r for r in RULES if RULES[r].always), "no-training",
                                    "sharded-checkpoint"]


# -- before anything starts (no process is started by these) ----------------------------


def test_options_after_script_and_no_process_group_are_said_at_the_start(
        tmp_path: Path) -> None:
    shutil.copy(SCRIPTS / "unconverted.py", tmp_path / "train.py")
    result = distrun("launch", "--dry-run", "train.py", "--nproc-per-node", "2", cwd=tmp_path)
    assert result.returncode == 0
    assert ("distrun: warning: [options-after-script] train.py: --nproc-per-node comes after "
            "the script: it is passed to the script, not to distrun") in result.stderr
    assert "[no-process-group]" not in result.stderr  # one process: nothing to say
    result = distrun("launch", "--dry-run", "--nproc-per-node", "2", "train.py", cwd=tmp_path)
    assert "distrun: warning: [no-process-group] train.py: never sets up torch." in result.stderr
    assert "  fix: convert it: `distrun convert SCRIPT`" in result.stderr


def test_a_syntax_error_is_exit_2_and_a_typo_gets_a_suggestion(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n\ndef main(:\n    pass\n")
    result = distrun("launch", "--nproc-per-node", "2", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("distrun: error: train.py:3:10: not valid Python")
    assert "torchrun" not in result.stderr and "master port" not in result.stderr
    result = distrun("launch", "--nproc-per-node", "2", "trian.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "did you mean train.py?" in result.stderr


def test_a_zero3_state_dict_saved_as_is_is_a_sharded_checkpoint(tmp_path: Path) -> None:
    """ZeRO-3's `model.state_dict()` holds empty tensors: named at the save's line under
    the default check; gathered first (FULL_STATE=1), clean."""
    pytest.importorskip("deepspeed")
    code, stderr, record = launch(tmp_path, "zero3_sharded_save.py")
    assert (code, rules_of(record)) == (0, ["sharded-checkpoint"]), stderr[-3000:]
    assert "zero3_sharded_save.py:35: rank 0 saved ZeRO-3 partitioned parameters" in stderr
    assert torch.load(tmp_path / "model.pt")["0.weight"].shape == (0,)  # what it warns of
    code, stderr, record = launch(tmp_path, "zero3_sharded_save.py", env={"FULL_STATE": "1"})
    assert (code, rules_of(record)) == (0, []), stderr[-3000:]
    assert torch.load(tmp_path / "model.pt")["0.weight"].shape == (16, 8)
