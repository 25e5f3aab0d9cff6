"""A converted script can still be imported (`from train_ddp import evaluate`): the rank
names and the device live at module level, the process group starts only under the main
guard."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.conftest import CORPUS, distrun, run_cmd

PROBE = """\
import torch.distributed as dist
import converted
print(converted.RANK, converted.WORLD_SIZE, converted.DEVICE, dist.is_initialized())
"""


def test_the_converted_module_imports_without_starting_a_process_group(tmp_path: Path) -> None:
    script = tmp_path / "eval_loop.py"
    shutil.copy(CORPUS / "eval_loop.py", script)
    result = distrun("convert", str(script), "-o", str(tmp_path / "converted.py"))
    assert result.returncode == 0, result.stderr
    probe = run_cmd([sys.executable, "-c", PROBE], cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["0", "1", "cpu", "False"]
