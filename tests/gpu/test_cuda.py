"""On a CUDA machine: NCCL, mixed precision and doctor's GPU checks, for real.

Skipped where CUDA is absent (here and in CI). On a GPU machine:
`python -m pytest -m gpu tests/gpu`. Each conversion is compared with its original on the
same GPU: a world of one NCCL process (`--nproc-per-node gpu` on a one-GPU machine) must
train exactly like the script it came from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import CORPUS, ROOT, distrun
from tests.e2e.test_corpus_equivalence import (
    assert_same_checkpoint,
    assert_weights_close,
    eval_lines,
    run_single,
    state_dict_of,
)

pytestmark = [pytest.mark.gpu, pytest.mark.e2e,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# native_amp: GradScaler and torch.cuda.amp.autocast enabled on CUDA; the others move
# model and batches with .cuda(), .to(device) and torch.device("cuda", ...).
NCCL_SCRIPTS = ["native_amp.py", "device_patterns.py", "trainer_class.py", "eval_loop.py"]


def convert(name: str, folder: Path, *options: str) -> tuple[Path, Path]:
    script = folder / name
    shutil.copy(CORPUS / name, script)
    converted = folder / "converted.py"
    result = distrun("convert", str(script), *options, "-o", str(converted))
    assert result.returncode == 0, result.stdout + result.stderr
    return script, converted


def launch_on_the_gpus(converted: Path, folder: Path, launcher: str = "torchrun",
                       *script_args: str) -> str:
    """The converted script on every GPU (one here), NCCL_DEBUG=INFO, under `--check` (its
    probe fingerprints CUDA tensors where they live); its output."""
    result = distrun("launch", "--launcher", launcher, "--nproc-per-node", "gpu", "--check",
                     str(converted), *script_args, cwd=folder,
                     env={"BATCH_SIZE": str(64 // torch.cuda.device_count()),
                          "OUT_PATH": str(folder / "multi.pt"), "NCCL_DEBUG": "INFO"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # NCCL prints its INFO lines when it forms the communicator: the proof that the
    # converted script chose nccl (gloo prints none of them). accelerate forms no process
    # group for a world of one.
    if launcher != "accelerate" or torch.cuda.device_count() > 1:
        assert "NCCL INFO" in output, output[-3000:]
    compared = ("no problem found" if torch.cuda.device_count() > 1 else
                "nothing compared, the checks compare the ranks of a node")
    assert compared in result.stderr, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("name", NCCL_SCRIPTS)
def test_converted_script_on_nccl_trains_like_the_original(name: str, tmp_path: Path) -> None:
    script, converted = convert(name, tmp_path)
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path)
    assert_weights_close(tmp_path)
    assert eval_lines(multi) == eval_lines(single.stdout)


def test_fsdp_target_on_cuda_trains_like_the_original(tmp_path: Path) -> None:
    """--to fsdp: fully_shard on the rank's GPU, NCCL, the full state dict saved by rank 0
    with the original's keys, equal to the original's run on the same GPU."""
    script, converted = convert("eval_loop.py", tmp_path, "--to", "fsdp")
    assert "fully_shard(" in converted.read_text()
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path)
    assert_same_checkpoint(tmp_path)
    assert eval_lines(multi) == eval_lines(single.stdout)


@pytest.mark.parametrize(("zero", "launcher"), [("2", "deepspeed"), ("3", "torchrun")])
def test_deepspeed_target_on_cuda_trains_like_the_original(zero: str, launcher: str,
                                                           tmp_path: Path) -> None:
    """--to deepspeed: the engine on the rank's GPU (ZeRO-2 under DeepSpeed's launcher,
    ZeRO-3 under torchrun), equal to the original's run on the same GPU."""
    pytest.importorskip("deepspeed")
    script, converted = convert("eval_loop.py", tmp_path, "--to", "deepspeed", "--zero", zero)
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path, launcher)
    assert_same_checkpoint(tmp_path)
    assert eval_lines(multi) == eval_lines(single.stdout)


def test_accelerate_target_on_cuda_trains_like_the_original(tmp_path: Path) -> None:
    """--to accelerate under `accelerate launch`: the Accelerator on the rank's GPU (its
    prepared loader moves the batches), NCCL, equal to the original on the same GPU."""
    script, converted = convert("eval_loop.py", tmp_path, "--to", "accelerate")
    assert "Accelerator(" in converted.read_text()
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path, "accelerate")
    assert_same_checkpoint(tmp_path)
    assert eval_lines(multi) == eval_lines(single.stdout)


def test_amp_fp16_adds_a_grad_scaler_that_trains_on_cuda(tmp_path: Path) -> None:
    """--amp fp16: autocast really runs in half precision on CUDA (the weights are not
    those of fp32, bit for bit) and the GradScaler keeps them finite and close."""
    script, converted = convert("eval_loop.py", tmp_path, "--amp", "fp16")
    run_single(script, tmp_path)
    launch_on_the_gpus(converted, tmp_path)
    assert_weights_close(tmp_path, tol=5e-2)
    single, multi = state_dict_of(tmp_path / "single.pt"), state_dict_of(tmp_path / "multi.pt")
    assert any(not torch.equal(single[k], multi[k]) for k in single), "fp16 changed nothing"


def test_amp_bf16_trains_on_cuda_close_to_the_original(tmp_path: Path) -> None:
    script, converted = convert("functions_main_guard.py", tmp_path, "--amp", "bf16")
    run_single(script, tmp_path)
    launch_on_the_gpus(converted, tmp_path)
    assert_weights_close(tmp_path, tol=5e-2)  # bf16 keeps ~3 significant digits


def test_doctor_sees_the_gpu_and_runs_nccl() -> None:
    result = distrun("doctor", "--json", "--nproc-per-node", str(torch.cuda.device_count()))
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert result.returncode == 0, result.stdout + result.stderr
    assert records["gpus"]["status"] == "ok"
    assert torch.cuda.get_device_name(0) in records["gpus"]["detail"]
    assert records["nccl"]["status"] == "ok"
    assert records["smoke test (nccl)"]["status"] == "ok", records["smoke test (nccl)"]
    assert records["nproc_per_node"]["status"] == "ok"


def test_doctor_fails_more_processes_than_gpus() -> None:
    too_many = str(torch.cuda.device_count() + 1)
    result = distrun("doctor", "--json", "--no-smoke", "--nproc-per-node", too_many)
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert result.returncode == 1
    assert records["nproc_per_node"]["status"] == "fail"
    assert "Duplicate GPU" in records["nproc_per_node"]["hint"]


def test_more_processes_than_gpus_fails_with_the_fix(tmp_path: Path) -> None:
    """Two processes on one GPU: rank 1's torch.cuda.set_device(1) fails at once, and
    distrun's report says why and what to pass instead."""
    if torch.cuda.device_count() != 1:
        pytest.skip("needs exactly one GPU")
    _, converted = convert("eval_loop.py", tmp_path)
    result = distrun("launch", "--nproc-per-node", "2", str(converted), cwd=tmp_path,
                     env={"BATCH_SIZE": "32", "OUT_PATH": str(tmp_path / "multi.pt")})
    assert result.returncode == 1
    assert "rank 1 (local rank 1)" in result.stderr and "[first failure]" in result.stderr
    assert "hint: local rank 1 has no GPU of its own" in result.stderr, result.stderr
    assert "--nproc-per-node gpu" in result.stderr


@pytest.mark.parametrize("device", ["none", "cpu"])
def test_a_script_that_names_no_gpu_trains_on_the_cpu_of_a_gpu_machine(
        tmp_path: Path, device: str) -> None:
    """A script that never names a GPU (no device at all, or `device = "cpu"`) trains on
    the CPU: converted, its ranks do too, with gloo, on a machine with a GPU (a model moved
    to the GPU would meet its batches on the CPU at the first step; DDP given a GPU's
    device_ids for a model on the CPU refuses it), and on 2 processes where there is one
    GPU."""
    script = tmp_path / "train.py"
    source = (ROOT / "tests/convert/fixtures/agreed/loss_tests.py").read_text()
    if device == "cpu":
        source = source.replace("model = nn.Linear(4, 1)\n", "device = torch.device(\"cpu\")\n"
                                "model = nn.Linear(4, 1).to(device)\n")
        assert "device = torch" in source
    script.write_text(source)
    converted = tmp_path / "converted.py"
    result = distrun("convert", str(script), "-o", str(converted))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[device.cpu_script]" in result.stdout
    assert "--nproc-per-node 2 " in result.stdout  # not `gpu`: the script trains on the CPU
    single = run_single(script, tmp_path)
    multi = distrun("launch", "--nproc-per-node", "2", "--check", str(converted), cwd=tmp_path,
                    env={"BATCH_SIZE": "32", "OUT_PATH": str(tmp_path / "multi.pt"),
                         "NCCL_DEBUG": "INFO"})
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert "no problem found" in multi.stderr and "NCCL INFO" not in multi.stdout + multi.stderr
    assert_same_checkpoint(tmp_path)
    assert single.stdout.strip() == multi.stdout.strip() != ""


def test_a_loop_left_on_the_mean_loss_runs_its_collective_on_the_gpu(tmp_path: Path) -> None:
    """The agreed exit and scheduler (`mean_over_ranks`) of a script on a GPU: the mean is
    all-reduced on the rank's GPU (NCCL reduces no CPU tensor), the run leaves where the
    original does."""
    source = (ROOT / "tests/convert/fixtures/agreed/loss_tests.py").read_text()
    source = source.replace("model = nn.Linear(4, 1)\n", "device = torch.device(\"cuda\")\n"
                            "model = nn.Linear(4, 1).to(device)\n")
    source = source.replace("model(xb), yb)", "model(xb.to(device)), yb.to(device))")
    (tmp_path / "loss_tests.py").write_text(source)
    script = tmp_path / "loss_tests.py"
    converted = tmp_path / "converted.py"
    result = distrun("convert", str(script), "-o", str(converted))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mean_over_ranks(step_loss)" in converted.read_text()
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path)
    assert_same_checkpoint(tmp_path)
    stops = [line for line in multi.splitlines() if line.startswith("stopped at epoch")]
    assert "stopped at epoch" in single.stdout and stops == [single.stdout.strip()]


def test_a_device_string_read_as_a_string_still_runs_on_the_gpu(tmp_path: Path) -> None:
    """`device = 'cuda' if ... else 'cpu'` then `if 'cuda' in device:` and
    `device.upper()`: the converted device is a torch.device, which `in` and `.upper()`
    refuse (TypeError, AttributeError: on a GPU machine only, where the branch takes
    'cuda'). Read as `str(device)`, the run is the original's on the GPU."""
    script = tmp_path / "strings.py"
    script.write_text((ROOT / "tests/convert/fixtures/device/device_read_as_string.py"
                       ).read_text())
    converted = tmp_path / "converted.py"
    result = distrun("convert", str(script), "-o", str(converted))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "'cuda' in str(device)" in converted.read_text()
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path)
    assert_same_checkpoint(tmp_path)
    assert "training on CUDA" in single.stdout and "training on CUDA" in multi


def test_classes_whose_conversion_adds_collectives_run_them_on_the_gpu(tmp_path: Path) -> None:
    """tests/gpu/scripts/classes_on_gpu.py: a GPU index read from the command line, the
    optimizer built before the model moves to the GPU, a model trained through a method of
    its own (broadcast and averaged by hand), predictions and a loss collected over the
    training and measured after it (gathered, all-reduced). NCCL moves only GPU tensors;
    the converted script, told `--gpu 3` on a machine with one GPU, trains on the rank's
    GPU and prints the original's metrics."""
    script = tmp_path / "classes.py"
    shutil.copy(ROOT / "tests/gpu/scripts/classes_on_gpu.py", script)
    converted = tmp_path / "converted.py"
    result = distrun("convert", str(script), "-o", str(converted))
    assert result.returncode == 0, result.stdout + result.stderr
    for rule in ("device.string", "model.hand_average", "data.train_metrics"):
        assert f": {rule}:" in result.stdout, result.stdout
    single = run_single(script, tmp_path)
    multi = launch_on_the_gpus(converted, tmp_path, "torchrun", "--gpu", "3")
    assert_same_checkpoint(tmp_path)
    metrics = [line for line in multi.splitlines() if line.startswith("metrics ")]
    assert len(metrics) == 4 and metrics == single.stdout.strip().splitlines(), multi


QUIET_AFTER_NCCL = """\
import time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("reduced", t.sum().item(), flush=True)
weight = torch.nn.Parameter(t.clone())  # one step: a job that trains (the check's no-training)
optimizer = torch.optim.SGD([weight], lr=0.1)
weight.sum().backward()
optimizer.step()
time.sleep(25)  # quiet: distrun reports where the rank is, the recorder's dump with it
dist.destroy_process_group()
"""


def test_a_quiet_nccl_job_s_report_reads_the_flight_recorder(tmp_path: Path) -> None:
    """NCCL's Flight Recorder, turned on by the check and dumped on demand when the job
    goes quiet: its last entry is the all_reduce, completed."""
    (tmp_path / "quiet.py").write_text(QUIET_AFTER_NCCL)
    result = distrun("launch", "--nproc-per-node", "1", "--check", "--hang-report-after", "5",
                     "quiet.py", cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "flight recorder's last: all_reduce #1, sizes [[4]] Float: completed" in (
        result.stderr), result.stderr[-3000:]
    assert "Flight Recorder dumps are kept in" in result.stderr, result.stderr[-3000:]
