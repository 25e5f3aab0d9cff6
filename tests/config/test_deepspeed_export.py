"""`distrun config export --format deepspeed`: the job's DeepSpeed config (built from the
`deepspeed:` section, or the file the job reads with the section written in), which
distrun's own checker passes; the `deepspeed` and `distrun launch` commands, checked with
DeepSpeed's own argument parser and hostfile reader, and the multi-node one really run
(two "nodes" on this machine); the other exports giving the workers DS_CONFIG."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from distrun.config import deepspeed, jsonc
from distrun.netinfo import free_port
from tests.conftest import distrun

JOB = "launcher: deepspeed\nscript: train.py\nscript_args: [--epochs, '3']\nnproc_per_node: 2\n"


def job(folder: Path, text: str, name: str = "distrun.yaml") -> Path:
    (folder / "train.py").write_text("")
    path = folder / name
    path.write_text(text)
    return path


def check_problems(text: str) -> list[tuple[str, str]]:
    """What distrun's ds_config checker says of an exported config: (severity, key)."""
    return [(p.severity, p.key) for p in deepspeed.check(jsonc.parse(text))]


def test_a_config_built_from_the_section(tmp_path: Path) -> None:
    path = job(tmp_path, JOB + "mixed_precision: bf16\ndeepspeed:\n  zero_stage: 1\n"
               "  micro_batch: 4\n")
    result = distrun("config", "export", "--format", "deepspeed", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0, "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
        "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    assert '"gradient_clipping": 0.0' in result.stdout  # written out: DeepSpeed's is 1.0
    assert check_problems(result.stdout) == []
    assert result.stderr.splitlines() == [
        f"# DeepSpeed config: ds_config.json (from the deepspeed: section of {path})",
        "# DeepSpeed's launcher, on this machine:",
        "ACCELERATE_MIXED_PRECISION=bf16 DISTRUN_MIXED_PRECISION=bf16 DS_CONFIG=ds_config.json "
        "deepspeed --num_gpus 2 --no_local_rank train.py --epochs 3",
        "# the same job through distrun (ranks supervised, a failure named):",
        "distrun launch --nproc-per-node 2 --launcher deepspeed --mixed-precision bf16 "
        "--env DS_CONFIG=ds_config.json train.py --epochs 3"]


def test_built_with_offload_and_fp16_only_the_offload_is_said(tmp_path: Path) -> None:
    path = job(tmp_path, JOB + "mixed_precision: fp16\ndeepspeed:\n  offload_optimizer: cpu\n"
               "  micro_batch: 8\n  gradient_clipping: 0.5\n")
    result = distrun("config", "export", "--format", "deepspeed", str(path))
    data = json.loads(result.stdout)
    assert data["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    assert (data["zero_force_ds_cpu_optimizer"], data["gradient_clipping"]) == (False, 0.5)
    assert data["fp16"] == {"enabled": True, "auto_cast": True}
    assert check_problems(result.stdout) == [("warning", "zero_optimization.offload_optimizer")]


def test_the_file_the_job_reads_with_the_section_written_in(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text(
        '{\n  // ZeRO-2\n  "train_micro_batch_size_per_gpu": 16,\n  "gradient_clipping": 1.0,\n'
        '  "zero_optimization": {"stage": 2},\n}\n')
    path = job(tmp_path, JOB + "deepspeed:\n  config: ds.json\n  zero_stage: 2\n"
               "  offload_optimizer: none\n")
    result = distrun("config", "export", "--format", "deepspeed", str(path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {  # plain JSON now: no comment, no trailing comma
        "train_micro_batch_size_per_gpu": 16, "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}}
    assert check_problems(result.stdout) == []
    assert f"(from {tmp_path / 'ds.json'})" in result.stderr.splitlines()[0]


def test_o_folder_writes_the_config_and_a_multi_node_hostfile(tmp_path: Path) -> None:
    path = job(tmp_path, "launcher: deepspeed\nscript: train.py\nnnodes: 2\nnode_rank: 1\n"
               "master_addr: 10.0.0.1\nmaster_port: 29511\nnproc_per_node: 4\n"
               "env:\n  NCCL_DEBUG: WARN\ndeepspeed:\n  micro_batch: 2\n")
    result = distrun("config", "export", "--format", "deepspeed", str(path), "-o", "run/",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "wrote run/ds_config.json\nwrote run/hostfile\n"
    assert check_problems((tmp_path / "run" / "ds_config.json").read_text()) == []
    assert (tmp_path / "run" / "hostfile").read_text().splitlines()[1:] == [
        "node0 slots=4", "node1 slots=4"]
    lines = result.stdout.splitlines()
    assert lines[2] == (
        "DS_CONFIG=run/ds_config.json NCCL_DEBUG=WARN deepspeed --hostfile run/hostfile "
        "--no_ssh --node_rank 1 --num_nodes 2 --master_addr 10.0.0.1 --num_gpus 4 "
        "--master_port 29511 --no_local_rank train.py")
    assert lines[4] == (
        "distrun launch --nproc-per-node 4 --launcher deepspeed --master-port 29511 --env "
        "DS_CONFIG=run/ds_config.json --env NCCL_DEBUG=WARN --nnodes 2 --node-rank 1 "
        "--master-addr 10.0.0.1 train.py")
    again = distrun("config", "export", "--format", "deepspeed", str(path), "-o", "run/",
                    cwd=tmp_path)  # the same content: nothing to replace
    assert again.returncode == 0, again.stderr
    (tmp_path / "run" / "hostfile").write_text("mine slots=1\n")
    refused = distrun("config", "export", "--format", "deepspeed", str(path), "-o", "run/",
                      cwd=tmp_path)
    assert refused.returncode == 2 and "run/hostfile already exists" in refused.stderr


def test_the_commands_are_what_deepspeeds_own_parser_reads(tmp_path: Path) -> None:
    runner = pytest.importorskip("deepspeed.launcher.runner")
    path = job(tmp_path, "script: train.py\nnnodes: 2\nmaster_addr: 10.0.0.1\n"
               "nproc_per_node: 4\ndeepspeed:\n  micro_batch: 2\n")
    result = distrun("config", "export", "--format", "deepspeed", str(path), "-o", "ds.json",
                     cwd=tmp_path)
    command = shlex.split(result.stdout.splitlines()[2])
    assert command[:2] == ["DS_CONFIG=ds.json", "deepspeed"]
    args = runner.parse_args(command[2:])
    assert (args.hostfile, args.no_ssh, args.node_rank, args.num_nodes, args.num_gpus) == (
        "hostfile", True, 0, 2, 4)
    assert (args.master_addr, args.master_port, args.no_local_rank, args.user_script) == (
        "10.0.0.1", 29500, True, "train.py")
    pool = runner.fetch_hostfile(str(tmp_path / "hostfile"))
    assert dict(pool) == {"node0": 4, "node1": 4}


@pytest.mark.parametrize(("text", "words"), [
    ("script: train.py\ndeepspeed:\n  zero_stage: 2\n", "set deepspeed.micro_batch: N"),
    ("script: train.py\nnnodes: '1:2'\nrdzv:\n  endpoint: h:29400\ndeepspeed:\n"
     "  micro_batch: 2\n", "DeepSpeed's launcher has no rendezvous"),
    ("script: train.py\nmax_restarts: 1\ndeepspeed:\n  micro_batch: 2\n",
     "DeepSpeed's launcher restarts nothing"),
    ("script: train.py\nnproc_per_node: cpu\ndeepspeed:\n  micro_batch: 2\n",
     "needs nproc_per_node as a number here, not 'cpu'"),
    ("script: train.py\nnnodes: 2\ndeepspeed:\n  micro_batch: 2\n",
     "needs node 0's address"),
])
def test_what_cannot_be_exported_is_said(tmp_path: Path, text: str, words: str) -> None:
    result = distrun("config", "export", "--format", "deepspeed", str(job(tmp_path, text)))
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_other_exports_give_the_workers_ds_config(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ds.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0}))
    path = job(tmp_path, JOB + "kubernetes:\n  image: img:1\ndeepspeed:\n  config: ds.json\n",
               "conf/job.yaml")
    ds = "conf/ds.json"

    def export(fmt: str) -> str:
        result = distrun("config", "export", "--format", fmt, "conf/job.yaml", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert path.exists()
    torchrun = export("torchrun").splitlines()
    assert torchrun[1].startswith("# launcher: deepspeed in the file; torchrun runs a script")
    assert torchrun[2].startswith(f"DS_CONFIG={ds} torchrun --nproc-per-node=2 ")
    assert f"--launcher deepspeed --env DS_CONFIG={ds} train.py" in export("slurm")
    pod = yaml.safe_load(export("kubernetes"))["spec"]["pytorchReplicaSpecs"]["Master"]
    assert pod["template"]["spec"]["containers"][0]["env"] == [{"name": "DS_CONFIG",
                                                                 "value": ds}]
    assert f"#   DS_CONFIG={ds} accelerate launch --config_file THIS_FILE " in export("accelerate")


def test_the_deepspeed_export_does_not_import_torch(tmp_path: Path) -> None:
    job(tmp_path, JOB + "deepspeed:\n  micro_batch: 2\n")
    code = ("import sys\nfrom distrun.cli import main\ntry:\n"
            "    main(['config', 'export', '--format', 'deepspeed'])\nexcept SystemExit:\n"
            "    pass\nprint('IMPORTED', sorted(m for m in ('torch', 'libcst', 'deepspeed') "
            "if m in sys.modules))\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert "IMPORTED []" in run.stdout and '"gradient_clipping"' in run.stdout, run.stderr


@pytest.mark.e2e
def test_the_exported_multi_node_command_runs_on_two_nodes(tmp_path: Path) -> None:
    """Both nodes' `deepspeed --no_ssh --node_rank R` commands, run here, make one world."""
    pytest.importorskip("deepspeed")
    (tmp_path / "world.py").write_text(
        "import os, sys\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "sys.stdout.write(f\"rank {dist.get_rank()} world {dist.get_world_size()} ds "
        "{os.environ['DS_CONFIG']} args {sys.argv[1:]}\\n\")\ndist.destroy_process_group()\n")
    commands, port = [], free_port()
    for rank in (0, 1):
        path = job(tmp_path, f"script: world.py\nscript_args: [--lr, '0.1']\nnnodes: 2\n"
                   f"node_rank: {rank}\nmaster_addr: 127.0.0.1\nmaster_port: {port}\n"
                   "nproc_per_node: 1\ndeepspeed:\n  micro_batch: 2\n", f"node{rank}.yaml")
        result = distrun("config", "export", "--format", "deepspeed", str(path), "-o",
                         "ds.json", cwd=tmp_path)  # the same files for both: written once
        assert result.returncode == 0, result.stderr
        commands.append(shlex.split(result.stdout.splitlines()[2]))
    assert [c[0] for c in commands] == ["DS_CONFIG=ds.json"] * 2
    deepspeed_cli = str(Path(sys.executable).with_name("deepspeed"))
    nodes = [subprocess.Popen([deepspeed_cli, *c[2:]], cwd=tmp_path, text=True,
                              env={**os.environ, "DS_CONFIG": "ds.json"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True) for c in commands]
    try:
        outputs = [node.communicate(timeout=180) for node in nodes]
    finally:
        for node in nodes:  # a node left waiting for the other: its whole group
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
    assert [node.returncode for node in nodes] == [0, 0], outputs
    lines = sorted(line for out, _ in outputs for line in out.splitlines()
                   if line.startswith("rank"))
    assert lines == ["rank 0 world 2 ds ds.json args ['--lr', '0.1']",
                     "rank 1 world 2 ds ds.json args ['--lr', '0.1']"]

