"""What `distrun launch` can tell from the script's text before anything starts.

- A script that does not parse is refused (exit 2) before any process starts.
- `[no-process-group]`: neither the script nor the local modules it imports set up
  torch.distributed (or a library that does: accelerate, DeepSpeed, Lightning, the
  Hugging Face Trainer), yet it is launched on several processes.
- `[options-after-script]`: a distrun option after SCRIPT goes to the script.

Reads files with `ast` only: nothing of the script is imported or run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from distrun.check.rules import Finding
from distrun.errors import LaunchError

# Names whose presence means the script takes part in a process group (it or a library
# it hands the model to sets one up).
DISTRIBUTED = frozenset({
    "init_process_group", "DistributedDataParallel", "FullyShardedDataParallel",
    "fully_shard", "Accelerator", "accelerate", "deepspeed", "lightning",
    "pytorch_lightning", "init_device_mesh", "TrainingArguments",
})


def parse_script(script: str) -> ast.Module:
    """SCRIPT's syntax tree, or exit 2 naming the line (nothing has started yet)."""
    path = Path(script)
    try:
        source = path.read_bytes()
    except OSError as err:
        raise LaunchError(f"{script}: cannot read it: {err.strerror}") from None
    try:
        return ast.parse(source, filename=script)
    except SyntaxError as err:
        where = f"{script}:{err.lineno}:{err.offset}" if err.lineno else script
        raise LaunchError(f"{where}: not valid Python: {err.msg}",
                          "fix the script; no process was started") from None
    except ValueError as err:  # null bytes
        raise LaunchError(f"{script}: not valid Python: {err}") from None


def no_process_group(script: str) -> Finding | None:
    """A finding when nothing in SCRIPT or its local modules sets up torch.distributed
    while something there uses torch."""
    from distrun.convert.project import find_modules
    from distrun.errors import InputError

    try:
        modules = [path for path, _ in find_modules(Path(script))]
    except InputError:
        return None
    names: set[str] = set()
    for path in modules:
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        names |= _names(tree)
    if "torch" not in names or names & DISTRIBUTED:
        return None
    others = f" or the {len(modules) - 1} local modules it imports" if len(modules) > 1 else ""
    return Finding("no-process-group", f"never sets up torch.distributed (no "
                   f"init_process_group, DDP, accelerate or DeepSpeed in it{others})", script)


def _names(tree: ast.Module) -> set[str]:
    """Every name, attribute and imported module (each dotted part) in `tree`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.update(alias.name.split("."))
        elif isinstance(node, ast.ImportFrom):
            found.update((node.module or "").split("."))
            found.update(alias.name for alias in node.names)
    return found


def options_after_script(script: str, args: tuple[str, ...], options: list[str],
                         source: str = "") -> Finding | None:
    """A distrun option among the script's arguments (unless the script itself mentions
    it, as its own option)."""
    for arg in args:
        if arg == "--":
            return None
        name = arg.split("=", 1)[0]
        if name in options and name not in source:
            return Finding("options-after-script", f"{arg} comes after the script: it is "
                           "passed to the script, not to distrun", script)
    return None
