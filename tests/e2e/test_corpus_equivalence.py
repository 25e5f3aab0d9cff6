"""The proof that a conversion is correct: same training on 2 processes as on 1.

For every script of tests/corpus/: run the original on one process with a batch of
64 (the whole data set: one batch per epoch), convert it, launch the result with
`distrun launch --nproc-per-node 2` on CPU (gloo) with 32 per rank (the same global
batch), then compare the saved weights to 1e-5 and the printed EVAL lines exactly
(each printed once, by rank 0).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import CORPUS, distrun, run_cmd
from tests.reference import run_in

SCRIPTS = sorted(p.name for p in CORPUS.glob("*.py"))
ACCELERATE_REORDERS_RNG = {"helper_loaders.py", "apex_trainer.py"}
pytestmark = pytest.mark.e2e


def state_dict_of(path: Path) -> dict[str, torch.Tensor]:
    obj = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    for key in ("model", "model_state_dict", "state_dict"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            return obj[key]
    assert isinstance(obj, dict), f"unexpected checkpoint type {type(obj)}"
    return obj


def imported_modules(source: str) -> set[str]:
    """Top-level package of every import in `source`."""
    tree = ast.parse(source)
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return {name.split(".")[0] for name in names}


def eval_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("EVAL ")]


def run_single(script: Path, folder: Path, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """The script on one process, batch 64, its checkpoint in single.pt; run once per
    session for a given script, environment and folder (tests/reference.py): a test runs
    it before writing its conversion into the folder, so that other tests share it."""
    result = run_in([sys.executable, str(script)], folder,
                    {"BATCH_SIZE": "64", "OUT_PATH": str(folder / "single.pt"), **(env or {})})
    assert result.returncode == 0, result.stderr
    return result


def run_two(converted: Path, folder: Path, launcher: str = "torchrun",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The converted script on 2 processes, batch 32 each, its checkpoint in multi.pt,
    under `launch --check`: any finding (exit code 3) is a converter bug."""
    result = distrun("launch", "--launcher", launcher, "--nproc-per-node", "2", "--check",
                     str(converted), cwd=folder,
                     env={"BATCH_SIZE": "32", "OUT_PATH": str(folder / "multi.pt"),
                          **(env or {})})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no problem found" in result.stderr, result.stderr
    return result


def assert_same_checkpoint(folder: Path) -> None:
    """multi.pt has single.pt's keys (no `module.` prefix) and its weights within 1e-5."""
    expected, got = state_dict_of(folder / "single.pt"), state_dict_of(folder / "multi.pt")
    assert not [k for k in got if k.startswith("module.")], "a `module.` prefix in the keys"
    assert sorted(expected) == sorted(got), "checkpoint keys differ (a `module.` prefix?)"
    assert_weights_close(folder)


def assert_weights_close(folder: Path, tol: float = 1e-5, got_file: str = "multi.pt") -> None:
    """Every tensor of single.pt is in `got_file`, equal within `tol`."""
    expected, got = state_dict_of(folder / "single.pt"), state_dict_of(folder / got_file)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=tol, rtol=tol, msg=key)


def test_corpus_is_big_enough() -> None:
    assert len(SCRIPTS) >= 12


@pytest.mark.parametrize("name", SCRIPTS)
def test_converted_script_trains_like_the_original(name: str, tmp_path: Path) -> None:
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    # apex is not installable here (and its amp is gone): apex scripts are compared with
    # their conversion run as a world of one process, which needs no apex either.
    uses_apex = "apex" in script.read_text()
    single = None if uses_apex else run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    conv = distrun("convert", str(script), "-o", str(converted), cwd=tmp_path)
    assert conv.returncode == 0, conv.stderr
    assert not imported_modules(converted.read_text()) & {"apex", "distrun"}
    single = single or run_single(converted, tmp_path)

    multi = run_two(converted, tmp_path)

    assert_same_checkpoint(tmp_path)
    assert eval_lines(multi.stdout) == eval_lines(single.stdout)


def test_converted_script_runs_under_accelerate_launch(tmp_path: Path) -> None:
    """The converted script is plain PyTorch: `accelerate launch` runs it too (its
    multi-process launcher is torchrun underneath; on CPU the script picks gloo). One
    script: the path is the same for every script."""
    from distrun.launch.resolve import free_port

    name = "eval_loop.py"
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    single = run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    assert distrun("convert", str(script), "-o", str(converted)).returncode == 0
    accelerate = Path(sys.executable).with_name("accelerate")
    multi = run_cmd(
        [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", str(free_port()), str(converted)],
        cwd=tmp_path, env={"BATCH_SIZE": "32", "OUT_PATH": str(tmp_path / "multi.pt")},
    )
    assert multi.returncode == 0, multi.stdout + multi.stderr
    expected, got = state_dict_of(tmp_path / "single.pt"), state_dict_of(tmp_path / "multi.pt")
    assert sorted(expected) == sorted(got)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-5, rtol=1e-5, msg=key)
    assert eval_lines(multi.stdout) == eval_lines(single.stdout)


def test_converted_script_also_runs_without_a_launcher(tmp_path: Path) -> None:
    """`python train_ddp.py` is a world of one process: same result as the original."""
    script = tmp_path / "eval_loop.py"
    shutil.copy(CORPUS / "eval_loop.py", script)
    env = {"BATCH_SIZE": "64"}
    single = run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    assert distrun("convert", str(script), "-o", str(converted)).returncode == 0
    alone = run_cmd([sys.executable, str(converted)], cwd=tmp_path,
                    env={**env, "OUT_PATH": str(tmp_path / "alone.pt")})
    assert alone.returncode == 0, alone.stderr
    assert_weights_close(tmp_path, tol=1e-6, got_file="alone.pt")
    assert eval_lines(alone.stdout) == eval_lines(single.stdout)


def test_amp_fp16_on_cpu_trains_exactly_like_the_original(tmp_path: Path) -> None:
    """--amp fp16 autocasts only with CUDA: on CPU the training must not change at all."""
    script = tmp_path / "eval_loop.py"
    shutil.copy(CORPUS / "eval_loop.py", script)
    run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    conv = distrun("convert", str(script), "--amp", "fp16", "-o", str(converted))
    assert conv.returncode == 0, conv.stderr
    assert "torch.autocast(" in converted.read_text() and "GradScaler" in converted.read_text()
    run_two(converted, tmp_path)
    assert_weights_close(tmp_path)


def test_amp_bf16_runs_on_cpu_close_to_the_original(tmp_path: Path) -> None:
    script = tmp_path / "functions_main_guard.py"
    shutil.copy(CORPUS / "functions_main_guard.py", script)
    run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    assert distrun("convert", str(script), "--amp", "bf16", "-o", str(converted)).returncode == 0
    run_two(converted, tmp_path)
    assert_weights_close(tmp_path, tol=5e-2)  # bf16 keeps ~3 significant digits


# The other targets are proved on the styles their own code handles differently, once
# each (all 17 scripts are proved under DDP above; every script's accelerate and DeepSpeed
# conversion is also a fixture of tests/convert): a checkpoint dict saved and resumed, a
# Trainer class, a script with no function, an evaluation loop, DataParallel unwrapped,
# mixed precision written in code, apex amp (accelerate's own precision).
OTHER_TARGETS = ["apex_amp.py", "checkpoint_dict.py", "dataparallel.py", "eval_loop.py",
                 "native_amp.py", "toplevel_script.py", "trainer_class.py"]


@pytest.mark.parametrize("name", OTHER_TARGETS)
def test_accelerate_target_trains_like_the_original(name: str, tmp_path: Path) -> None:
    """`convert --to accelerate`, run by `distrun launch --launcher accelerate` on 2 CPU
    processes: the same weights as the original on one process."""
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    # apex scripts: the reference is the conversion run as a world of one.
    uses_apex = "apex" in script.read_text()
    single = None if uses_apex else run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    conv = distrun("convert", str(script), "--to", "accelerate", "-o", str(converted))
    assert conv.returncode == 0, conv.stderr
    assert not imported_modules(converted.read_text()) & {"apex", "distrun"}
    single = single or run_single(converted, tmp_path)
    multi = run_two(converted, tmp_path, "accelerate")
    if name in ACCELERATE_REORDERS_RNG:
        # Its loader is prepared where it is built, before the model exists:
        # accelerate's prepare draws from the random generator, so the model starts from
        # other (equal on every rank) weights. Training runs; weights cannot match.
        assert len(eval_lines(multi.stdout)) == len(eval_lines(single.stdout))
        got = state_dict_of(tmp_path / "multi.pt")
        assert not [k for k in got if k.startswith("module.")], "a `module.` prefix in the keys"
        assert all(torch.isfinite(v).all() for v in got.values())
        return
    assert_same_checkpoint(tmp_path)
    assert eval_lines(multi.stdout) == eval_lines(single.stdout)


@pytest.mark.parametrize("target", ["ddp", "accelerate"])
def test_grad_accum_no_sync_trains_like_the_original(target: str, tmp_path: Path) -> None:
    """--grad-accum-no-sync: micro-steps skip the all-reduce, the result is unchanged."""
    script = tmp_path / "grad_accumulation.py"
    shutil.copy(CORPUS / "grad_accumulation.py", script)
    run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    conv = distrun("convert", str(script), "--grad-accum-no-sync", "--to", target, "-o",
                   str(converted))
    assert conv.returncode == 0, conv.stderr
    assert "no_sync" in converted.read_text()
    run_two(converted, tmp_path, "accelerate" if target == "accelerate" else "torchrun")
    assert_weights_close(tmp_path)


@pytest.mark.parametrize("name", ["eval_loop.py", "functions_main_guard.py", "helper_loaders.py"])
def test_sharded_evaluation_prints_the_single_process_metrics(name: str, tmp_path: Path) -> None:
    """--eval shard: each rank evaluates a shard, the sums are all-reduced: the printed
    evaluation is the single process's (the test sets do not divide evenly by 16 x 2)."""
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    single = run_single(script, tmp_path)
    converted = tmp_path / "converted.py"
    conv = distrun("convert", str(script), "--eval", "shard", "-o", str(converted))
    assert conv.returncode == 0, conv.stderr
    assert "all_reduce(eval_sums)" in converted.read_text()
    multi = run_two(converted, tmp_path)
    assert eval_lines(multi.stdout) == eval_lines(single.stdout)
    assert eval_lines(single.stdout)
    assert_weights_close(tmp_path)
