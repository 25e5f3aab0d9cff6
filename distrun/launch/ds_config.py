"""The DeepSpeed config a launch will hand to DeepSpeed, checked before anything starts.

A launch hands one to DeepSpeed when the script's arguments name it (`--deepspeed_config
FILE`, `--deepspeed-config`, `--ds_config`, `--ds-config`, `--deepspeed FILE.json`: the
options `distrun convert` looks for in a script) or the default the script gives that
option (`add_argument("--deepspeed_config", default="team_ds.json")`, read here, else
beside the script), when the job's environment sets
DS_CONFIG (what a converted script reads; checked when the file exists here), or, for
a script run by `--launcher deepspeed` or one that uses DeepSpeed, when ds_config.json
lies beside the script (where
`distrun convert --to deepspeed` writes it and the converted script reads it). The file is
checked as `distrun config validate` checks it (deepspeed.py: types and ranges, "auto",
the batch arithmetic against the job's world size when it is known), and any error stops
the launch (exit code 2) naming FILE:LINE. With a script that uses the Hugging Face
Trainer, "auto" values are its to fill in: not errors.
`launch --config distrun.yaml` checks the file named there through the config's own
loader (deepspeed_job.py) before this.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distrun.errors import LaunchError

FLAGS = ("--deepspeed_config", "--deepspeed-config", "--ds_config", "--ds-config",
         "--deepspeed")
NAME = "ds_config.json"


def named(args: tuple[str, ...] | list[str]) -> str | None:
    """The DeepSpeed config the script's arguments name, if any (the last one wins, as
    argparse does)."""
    found = None
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag not in FLAGS:
            continue
        if not equals:
            value = args[index + 1] if index + 1 < len(args) else ""
        if flag == "--deepspeed" and not value.endswith((".json", ".hjson")):
            continue  # DeepSpeed's own `--deepspeed` is a flag without a value
        if value and not value.startswith("-"):
            found = value
    return found


def option_default(text: str) -> str | None:
    """The default path of the script's own argparse option naming its DeepSpeed config
    (`add_argument("--deepspeed_config", default="team_ds.json")`), if written out."""
    if not any(flag in text for flag in FLAGS):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = {a.value for a in node.args if isinstance(a, ast.Constant)}
        if not flags & set(FLAGS):
            continue
        for keyword in node.keywords:
            value = keyword.value
            if (keyword.arg == "default" and isinstance(value, ast.Constant)
                    and isinstance(value.value, str) and value.value.endswith(
                        (".json", ".hjson"))):
                return value.value
    return None


def find(script: str, args: tuple[str, ...], env: dict[str, str], launcher: str,
         module: bool, text: str) -> tuple[Path, str] | None:
    """The config the job hands to DeepSpeed, and how it was found."""
    given = named(args)
    if given is not None:
        return Path(given), "named in the script's arguments"
    default = option_default(text)
    if default is not None:  # read where the workers start (here), else beside the script
        for path in (Path(default), Path(script).parent / default):
            if path.is_file():
                return path, "the default of the script's DeepSpeed config option"
    if env.get("DS_CONFIG"):  # checked where it exists (it may name another node's file)
        path = Path(env["DS_CONFIG"])
        return (path, "DS_CONFIG in --env") if path.is_file() else None
    if module or not (launcher == "deepspeed" or "deepspeed" in text):
        return None
    beside = Path(script).parent / NAME
    return (beside, f"{NAME} beside the script") if beside.is_file() else None


def check(script: str, args: tuple[str, ...], env: dict[str, str], launcher: str,
          module: bool, world_size: int | None, load: Callable[..., Any]) -> None:
    """Raise a LaunchError listing every error of the DeepSpeed config this job would hand
    to DeepSpeed, each as FILE:LINE. `load` is distrun.config.deepspeed.load (handed in by
    the CLI: the config package imports launch, not the other way)."""
    text = ""
    if not module:
        try:
            text = Path(script).read_text(errors="replace")
        except OSError:
            text = ""
    found = find(script, args, env, launcher, module, text)
    if found is None:
        return
    path, how = found
    if not path.is_file():
        raise LaunchError(f"{path}: no such file (the DeepSpeed config {how}); nothing "
                          "was started", "give the path of the job's DeepSpeed config, "
                          "relative to where you launch")
    trainer = "transformers" in text and ("Trainer" in text or "TrainingArguments" in text)
    cfg = load(str(path), world_size,
                         "the Hugging Face Trainer" if trainer else None)
    errors = [p for p in cfg.problems if p.severity == "error"]
    if not errors:
        return
    listing = "\n".join(f"  {path}:{p.line}: {p.message}" for p in errors)
    raise LaunchError(f"{path} ({how}) would fail in DeepSpeed or be misread by it; nothing "
                      f"was started:\n{listing}",
                      f"fix it, then check it with `distrun config validate {path}`")
