"""The proof for `convert --to deepspeed`: the same training on 2 processes as on 1.

Every corpus script DeepSpeed can take is converted with a ZeRO stage (1, 2 or 3, in
turn; under ZeRO-3 with `stage3_param_persistence_threshold` 0, so that every weight is
sharded, as a large model's are, and not only those over DeepSpeed's default size),
launched on 2 CPU processes (gloo) by the deepspeed launcher or by torchrun (in turn),
under `launch --check`, with 32 per rank against the original's 64 on one process: the
saved weights (rank 0's `model.state_dict()`, plain keys) must equal the original's to
1e-5. The scripts DeepSpeed cannot take are refused, each for its reason.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import CORPUS, distrun, run_cmd
from tests.e2e.resume import resume_to_the_end, run_until_stopped
from tests.e2e.test_corpus_equivalence import (
    OTHER_TARGETS,
    SCRIPTS,
    assert_same_checkpoint,
    assert_weights_close,
    eval_lines,
    imported_modules,
    run_single,
    run_two,
)

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.e2e

REFUSED = {  # script -> why DeepSpeed cannot take it as it is
    "apex_amp.py": "apex mixed precision",
    "apex_trainer.py": "apex mixed precision",
    "native_amp.py": "mixed precision written in code",
}
TAKEN = [name for name in SCRIPTS if name not in REFUSED]
# trained under DeepSpeed: the styles of test_corpus_equivalence.OTHER_TARGETS it takes,
# loaders from a helper and gradient accumulation (DeepSpeed's gradient_accumulation_steps);
# ZeRO 1, 2, 3 and both launchers in turn (every pair among the first six)
TRAINED = [name for name in [*OTHER_TARGETS, "helper_loaders.py", "grad_accumulation.py"]
           if name in TAKEN]


def convert(script: Path, *options: str) -> Path:
    converted = script.with_name("converted.py")
    result = distrun("convert", str(script), "--to", "deepspeed", *options,
                     "-o", str(converted))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not imported_modules(converted.read_text()) & {"apex", "distrun"}
    written = converted.with_name("ds_config.json")
    config = json.loads(written.read_text())
    assert config["gradient_clipping"] == 0.0  # no corpus script clips
    if config["zero_optimization"]["stage"] == 3:
        config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        written.write_text(json.dumps(config))
    return converted


def test_the_corpus_has_enough_scripts_deepspeed_takes() -> None:
    assert len(TAKEN) >= 4


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_scripts_deepspeed_cannot_take_are_refused(name: str, tmp_path: Path) -> None:
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    result = distrun("convert", str(script), "--to", "deepspeed")
    assert result.returncode == 4, result.stdout
    assert REFUSED[name] in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


@pytest.mark.parametrize("name", TRAINED)
def test_deepspeed_target_trains_like_the_original(name: str, tmp_path: Path) -> None:
    index = TRAINED.index(name)
    zero, launcher = ("1", "2", "3")[index % 3], ("deepspeed", "torchrun")[index % 2]
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    single = run_single(script, tmp_path)
    converted = convert(script, "--zero", zero)
    multi = run_two(converted, tmp_path, launcher)
    assert_same_checkpoint(tmp_path)
    assert eval_lines(multi.stdout) == eval_lines(single.stdout)


def test_world_of_one_under_plain_python_and_the_weights_load_into_the_original(
        tmp_path: Path) -> None:
    script = tmp_path / "eval_loop.py"
    shutil.copy(CORPUS / "eval_loop.py", script)
    run_single(script, tmp_path)
    converted = convert(script)
    alone = run_cmd([sys.executable, str(converted)], cwd=tmp_path,
                    env={"BATCH_SIZE": "64", "OUT_PATH": str(tmp_path / "alone.pt")})
    assert alone.returncode == 0, alone.stderr
    assert_weights_close(tmp_path, tol=1e-6, got_file="alone.pt")
    spec = importlib.util.spec_from_file_location("original", script)
    assert spec is not None and spec.loader is not None
    original = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(original)  # its main guard does not run
    model = original.Classifier()
    model.load_state_dict(torch.load(tmp_path / "alone.pt", weights_only=True))


def test_offload_to_cpu_trains_like_the_original(tmp_path: Path) -> None:
    script = tmp_path / "trainer_class.py"
    shutil.copy(CORPUS / "trainer_class.py", script)
    run_single(script, tmp_path)
    converted = convert(script, "--offload-optimizer", "cpu")
    run_two(converted, tmp_path, "deepspeed")
    assert_same_checkpoint(tmp_path)


def test_mixed_precision_moves_into_the_config(tmp_path: Path) -> None:
    """native_amp.py's autocast and GradScaler go; DeepSpeed autocasts the forward pass
    to bf16 (on CPU too): close to the original's fp32 run, not equal."""
    script = tmp_path / "native_amp.py"
    shutil.copy(CORPUS / "native_amp.py", script)
    run_single(script, tmp_path)
    converted = convert(script, "--amp", "bf16")
    code = converted.read_text()
    assert "GradScaler(" not in code and "autocast(" not in code and "scaler." not in code
    config = json.loads((tmp_path / "ds_config.json").read_text())
    assert config["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    run_two(converted, tmp_path, "torchrun")
    assert_weights_close(tmp_path, tol=5e-2)


STOP_AFTER = """\
import os, runpy, sys
import torch.distributed as dist
from deepspeed.runtime.engine import DeepSpeedEngine
save, saves = DeepSpeedEngine.save_checkpoint, []
def stop_after(self, *args, **kwargs):  # the job is killed after its Nth checkpoint
    result = save(self, *args, **kwargs)
    saves.append(1)
    if len(saves) == int(os.environ["STOP_AFTER"]):
        dist.barrier()
        os._exit(0)
    return result
DeepSpeedEngine.save_checkpoint = stop_after
runpy.run_path(sys.argv[1], run_name="__main__")
"""


@pytest.mark.parametrize("zero", ["2", "3"])
def test_save_stop_and_resume_trains_like_the_uninterrupted_original(
        zero: str, tmp_path: Path) -> None:
    """checkpoint_dict.py saves {epoch, model, optimizer} every epoch: converted, every
    rank also saves the engine's checkpoint (its ZeRO shard of Adam's state). Stopped
    after epoch 1 and resumed (RESUME=file), it ends where the original's 4 uninterrupted
    epochs end; a file without its DeepSpeed checkpoint stops the resume loudly. Under
    ZeRO-3 the weights are gathered for the save and for the load."""
    script = tmp_path / "checkpoint_dict.py"
    shutil.copy(CORPUS / "checkpoint_dict.py", script)
    run_single(script, tmp_path)
    converted = convert(script, "--zero", zero)
    env = run_until_stopped(converted, tmp_path, STOP_AFTER)
    assert (tmp_path / "multi.pt.deepspeed" / "latest").read_text() == "zero"
    resume_to_the_end(converted, tmp_path, env)
    alone = run_cmd([sys.executable, str(converted)], cwd=tmp_path,
                    env={**env, "RESUME": str(tmp_path / "single.pt")})
    assert alone.returncode != 0
    assert "single.pt.deepspeed: no DeepSpeed checkpoint to resume the optimizer" in alone.stderr
