"""What jobs leave in /dev/shm (DeepSpeed's CPU all-reduce buffers, never freed by
DeepSpeed): found when no live process holds them, removed after a launch, reported by
doctor. The launch and doctor runs use a private /dev/shm (a mount namespace), so the
machine's own is left alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrun.launch import shm
from tests.conftest import ROOT

NAME = "deepspeed_allreduce_buffer_0_127.0.0.1_{}_{}"


def hold(path: Path) -> subprocess.Popen[str]:
    """A live process holding `path` open until its standard input closes."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1]); "
                               "print('held', flush=True); sys.stdin.read()", str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_only_buffers_nobody_holds_are_leftovers(tmp_path: Path) -> None:
    held, new, old = (tmp_path / NAME.format(port, 0) for port in (1, 2, 3))
    other = tmp_path / "not_deepspeeds"
    for path in (held, new, old, other):
        path.write_bytes(b"\0" * 4096)
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    holder = hold(held)
    try:
        found = shm.leftovers(tmp_path)
        assert found.files == [new, old] and found.size == 2 * 4096
        gone = shm.remove(since=time.time() - 60, folder=tmp_path)
        assert gone.files == [new]
        assert held.exists() and old.exists() and other.exists()
        assert shm.remove(folder=tmp_path).files == [old]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert shm.leftovers(tmp_path).files == [held]


JOB = """\
import os
import torch.distributed as dist
dist.init_process_group("gloo")
# what DeepSpeed's CPU all-reduce does at start: a buffer per rank, never unlinked
open(f"/dev/shm/deepspeed_allreduce_buffer_0_127.0.0.1_9_{dist.get_rank()}", "wb").write(
    bytes(1 << 20))
dist.barrier()
dist.destroy_process_group()
"""

IN_PRIVATE_SHM = """\
set -e
mount -t tmpfs -o size=64m tmpfs /dev/shm
python=$1; shift
head -c 1048576 /dev/zero > /dev/shm/deepspeed_allreduce_buffer_0_127.0.0.1_7_0
touch -d '1 hour ago' /dev/shm/deepspeed_allreduce_buffer_0_127.0.0.1_7_0
head -c 1048576 /dev/zero > /dev/shm/deepspeed_allreduce_buffer_0_127.0.0.1_8_0
"$python" -c 'import sys, time; f = open(sys.argv[1]); time.sleep(600)' \\
    /dev/shm/deepspeed_allreduce_buffer_0_127.0.0.1_8_0 &
holder=$!
sleep 1
"$python" -m distrun launch --no-check --nproc-per-node 2 "$@"
echo "left: $(cd /dev/shm && echo deepspeed_*)"
"$python" -c 'from distrun.doctor import Context; from distrun.doctor.system import check_shm
for r in check_shm(Context()): print("doctor:", r.name, r.status, r.detail)'
kill $holder
"""


def test_a_launch_removes_what_its_job_left_and_doctor_reports_older_ones(
        tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a private /dev/shm")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    (tmp_path / "run.sh").write_text(IN_PRIVATE_SHM)
    run = subprocess.run(["unshare", "-m", "bash", str(tmp_path / "run.sh"), sys.executable,
                          str(script)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if run.returncode != 0 and "mount" in run.stderr and "left:" not in run.stdout:
        pytest.skip(f"cannot mount here: {run.stderr.strip()}")
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    # the job's two buffers (ranks 0 and 1) removed; the held one and the old one kept
    assert "removed what the job left in /dev/shm" in run.stderr and "2 file(s), 2 MiB" in said
    left = next(line for line in run.stdout.splitlines() if line.startswith("left:"))
    assert left.split()[1:] == [NAME.format(7, 0), NAME.format(8, 0)], said
    assert "doctor: /dev/shm leftovers warn 1 file(s), 1 MiB" in said, said
