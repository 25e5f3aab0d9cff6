"""The save, stop and resume run shared by the FSDP and DeepSpeed proofs.

checkpoint_dict.py saves {epoch, model, optimizer} at the end of each of its 4 epochs
(0 to 3) and resumes from the file named by RESUME. The converted script runs on 2
processes until a shim ends the job after its 2nd checkpoint (each target's shim knows
what a checkpoint is: it runs the script named by its argument and exits after
STOP_AFTER of them), then runs again from the file it saved.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import distrun
from tests.e2e.test_corpus_equivalence import assert_same_checkpoint


def run_until_stopped(converted: Path, folder: Path, stop_after: str) -> dict[str, str]:
    """`converted` on 2 processes, batch 32 each, under the shim whose source is
    `stop_after`: ended after epoch 1, saved to multi.pt (the caller ran the original:
    single.pt). Returns the environment the converted script ran with."""
    (folder / "stop_after.py").write_text(stop_after)
    env = {"BATCH_SIZE": "32", "OUT_PATH": str(folder / "multi.pt")}
    stopped = distrun("launch", "--nproc-per-node", "2", "stop_after.py", str(converted),
                      cwd=folder, env={**env, "STOP_AFTER": "2"})
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "epoch 2" not in stopped.stdout and "epoch 1" in stopped.stdout
    return env


def resume_to_the_end(converted: Path, folder: Path, env: dict[str, str]) -> None:
    """`converted` resumed from multi.pt under `launch --check`: it goes on at epoch 2
    and ends with the weights of the original's uninterrupted run (single.pt)."""
    resumed = distrun("launch", "--nproc-per-node", "2", "--check", str(converted),
                      cwd=folder, env={**env, "RESUME": str(folder / "multi.pt")})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "at epoch 2" in resumed.stdout and "epoch 3" in resumed.stdout
    assert_same_checkpoint(folder)
