"""Helpers shared by the `distrun convert` CLI tests (tests/cli/test_convert_cli*.py).

`run` invokes `distrun` in-process with click's CliRunner on a thin wrapper around `main`
(so `DistrunError` -> exit code handling is exercised).
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import click
from click.testing import CliRunner, Result

from distrun.cli import main

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
"""


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def _entry(argv: tuple[str, ...]) -> None:
    main(list(argv))


def run(*args: str) -> Result:
    """Invoke `distrun ARGS...` in-process; stdout and stderr are kept apart."""
    result = CliRunner().invoke(_entry, list(args))
    # Only a SystemExit (from main) may end the command: any other exception is a crash.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"distrun {' '.join(args)} crashed: {result.exception!r}\n{result.output}"
        ) from result.exception
    return result


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                     else b"<not a regular file>")
        for p in sorted(folder.rglob("*"))
    }


def snapshot_names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def assert_error(result: Result | subprocess.CompletedProcess[str], code: int = 2) -> str:
    """An error exit: the expected code, a `distrun: error:` message, no traceback."""
    rc = result.exit_code if isinstance(result, Result) else result.returncode
    stderr = result.stderr
    stdout = result.stdout
    assert rc == code, f"exit {rc}, expected {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert "Traceback" not in stderr + stdout
    assert stderr.startswith("distrun: error:"), f"stderr:\n{stderr}"
    return stderr


def assert_no_distrun_imports_and_compiles(data: bytes, name: str) -> None:
    compile(data, name, "exec")  # bytes: honours a BOM or a coding line
    tree = ast.parse(data)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            continue
        for mod in mods:
            assert mod.split(".")[0] != "distrun", f"{name} imports {mod}"
