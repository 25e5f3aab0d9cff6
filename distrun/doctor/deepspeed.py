"""DeepSpeed: installed or not, the accelerator it picks, which of its ops are built, and
the lock file a killed op build leaves behind.

DeepSpeed compiles most of its ops on first use (torch's cpp_extension, in
$TORCH_EXTENSIONS_DIR/<op>/ or ~/.cache/torch_extensions/py<version>_<cpu|cuXXX>/<op>/). The
build holds a `lock` file in the op's folder; a build killed half-way leaves it, and every
later run that needs the op waits on it forever, silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from distrun.doctor.check import CheckResult, Context, installed_version

STALE_AFTER = 600  # seconds: a lock older than this is not a build in progress
_ACCELERATOR = ("from deepspeed.accelerator import get_accelerator; "
                "print(get_accelerator().device_name())")


def op_folders(environ: Mapping[str, str]) -> tuple[Path, list[Path]]:
    """Where torch's cpp_extension builds (DeepSpeed's JIT ops): the root, and the op
    folders in it. $TORCH_EXTENSIONS_DIR holds the ops themselves; the default root,
    $XDG_CACHE_HOME or ~/.cache/torch_extensions, a folder per Python and build
    (py311_cpu, py311_cu128...) holding them."""
    if environ.get("TORCH_EXTENSIONS_DIR"):
        root = Path(environ["TORCH_EXTENSIONS_DIR"])
        return root, sorted(p for p in root.glob("*") if p.is_dir())
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(cache) / "torch_extensions"
    return root, sorted(p for p in root.glob("py*_*/*") if p.is_dir())


def check_deepspeed(ctx: Context) -> Iterator[CheckResult]:
    version = installed_version("deepspeed")
    if version is None:
        yield CheckResult("deepspeed", "skip", "not installed (only needed for DeepSpeed "
                          "jobs): pip install 'distrun[deepspeed]'")
        return
    accelerator = _accelerator(ctx.environ)
    yield CheckResult("deepspeed", "ok" if accelerator else "warn",
                      f"deepspeed {version}, accelerator {accelerator or '?'}",
                      "" if accelerator else "`import deepspeed.accelerator` failed: run "
                      "`ds_report` to see why")
    yield from _ops(*op_folders(ctx.environ))


def _accelerator(environ: Mapping[str, str]) -> str | None:
    """The accelerator DeepSpeed picks (cpu, cuda...), asked in a child: importing it here
    would load its whole stack into distrun."""
    try:
        run = subprocess.run([sys.executable, "-c", _ACCELERATOR], capture_output=True,
                             text=True, timeout=120, env=dict(environ))
    except (OSError, subprocess.SubprocessError):
        return None
    lines = run.stdout.split()
    return lines[-1] if run.returncode == 0 and lines else None


def _ops(root: Path, folders: list[Path]) -> Iterator[CheckResult]:
    built = [folder.name for folder in folders if any(folder.glob("*.so"))]
    locks = [folder / "lock" for folder in folders if (folder / "lock").exists()]
    detail = (f"built in {root}: {', '.join(built)}" if built else
              f"none built in {root} yet (DeepSpeed compiles each op on its first use: "
              "minutes)")
    yield CheckResult("deepspeed ops", "ok", detail)
    now = time.time()
    for lock in locks:
        age = now - lock.stat().st_mtime
        if age >= STALE_AFTER:
            yield CheckResult("deepspeed ops", "fail", f"{lock}: left {age / 60:.0f} min ago "
                              "by an op build that did not finish; every DeepSpeed run that "
                              f"needs {lock.parent.name} waits on it forever",
                              f"remove it (no build is running): rm {lock}")
        else:
            yield CheckResult("deepspeed ops", "warn", f"{lock}: an op build is running, or "
                              "was killed in the last minutes",
                              f"if no DeepSpeed job is running here, rm {lock}")


CHECKS = [check_deepspeed]
