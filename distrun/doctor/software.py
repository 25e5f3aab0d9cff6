"""Launchers (torchrun, accelerate and its default config) and the apex trap."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from distrun.doctor.check import CheckResult, Context, installed_version


def check_torchrun(ctx: Context) -> Iterator[CheckResult]:
    if importlib.util.find_spec("torch.distributed.run") is None:
        yield CheckResult("torchrun", "fail", "torch.distributed.run not found",
                          "install torch 1.10 or newer")
        return
    detail = f"`{sys.executable} -m torch.distributed.run` (distrun launch uses this)"
    on_path = shutil.which("torchrun")
    interpreter = _interpreter_of(Path(on_path)) if on_path else None
    if interpreter and _prefix_of(interpreter) != sys.prefix:
        yield CheckResult("torchrun", "warn", f"{detail}; the `torchrun` on PATH runs "
                          f"{interpreter}", "plain `torchrun` would use another Python than "
                          "this one: activate the right environment")
        return
    yield CheckResult("torchrun", "ok", detail)


def _interpreter_of(script: Path) -> str | None:
    """The Python a script's `#!` line names (`#!/usr/bin/env python3` looked up on PATH)."""
    lines = script.read_text(errors="replace").splitlines()[:1]
    words = lines[0][2:].split() if lines and lines[0].startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = [shutil.which(w) or w for w in words[1:] if not w.startswith("-")][:1]
    return words[0] if words else None


def _prefix_of(interpreter: str) -> str | None:
    """`sys.prefix` of another Python: its environment (a venv's python links to the base
    interpreter, so the resolved path cannot tell two environments apart)."""
    try:
        run = subprocess.run([interpreter, "-c", "import sys; print(sys.prefix)"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip() if run.returncode == 0 else None


def accelerate_config_path(environ: dict[str, str] | os._Environ[str]) -> Path:
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface")
    return Path(home) / "accelerate" / "default_config.yaml"


def check_accelerate(ctx: Context) -> Iterator[CheckResult]:
    version = installed_version("accelerate")
    if version is None:
        yield CheckResult("accelerate", "skip", "not installed (only needed for "
                          "--launcher accelerate)")
        return
    yield CheckResult("accelerate", "ok", f"accelerate {version}")
    path = accelerate_config_path(dict(ctx.environ))
    if not path.exists():
        yield CheckResult("accelerate config", "ok", f"no default config ({path})")
        return
    try:
        from accelerate.commands.config.config_args import (  # type: ignore[import-untyped]
            load_config_from_file,
        )

        cfg = load_config_from_file(str(path))
        yield CheckResult("accelerate config", "ok", f"{path}: {cfg.distributed_type}, "
                          f"{cfg.num_processes} process(es)")
    except Exception as exc:
        yield CheckResult("accelerate config", "fail", f"{path}: {type(exc).__name__}: {exc}",
                          "fix it with `accelerate config`, or delete it")


def check_apex(ctx: Context) -> Iterator[CheckResult]:
    spec = importlib.util.find_spec("apex")
    if spec is None:
        yield CheckResult("apex", "ok", "not installed (torch.amp does mixed precision)")
        return
    where = spec.origin or (list(spec.submodule_search_locations or [""])[0])
    has_amp = importlib.util.find_spec("apex.amp") is not None
    if has_amp:
        yield CheckResult("apex", "warn", f"NVIDIA apex with apex.amp ({where})",
                          "apex.amp is deprecated and gone from current apex: `distrun "
                          "convert` migrates amp.initialize / amp.scale_loss to torch.autocast "
                          "+ torch.amp.GradScaler")
    else:
        yield CheckResult("apex", "warn", f"a package named apex without apex.amp ({where})",
                          "`from apex import amp` fails: this is the unrelated 'apex' web "
                          "toolkit from the package index, or a current NVIDIA apex (amp was "
                          "removed in 2025). Use torch.amp; `pip uninstall apex` if it is the "
                          "wrong package")


CHECKS = [check_torchrun, check_accelerate, check_apex]
