"""What `distrun launch` can tell from the script's text before anything starts.

- A script that does not parse is refused (exit 2) before any process starts.
- `[no-process-group]`: neither the script nor the local modules it imports set up
  torch.distributed (or a library that does: accelerate, DeepSpeed, Lightning, the
  Hugging Face Trainer), yet it is launched on several processes.
- `[options-after-script]`: a distrun option after SCRIPT goes to the script.
- `[spawn-under-launcher]`: the script (or a local module) starts its own processes with
  torch.multiprocessing's spawn/start_processes, outside a test of the launcher's
  environment variables (a script that spawns only when run alone is fine).

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


SPAWNS = frozenset({"spawn", "start_processes"})
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")


def spawn_under_launcher(script: str) -> Finding | None:
    """A finding at the first call of torch.multiprocessing's spawn or start_processes in
    SCRIPT or its local modules that no `if` on the launcher's variables guards."""
    from distrun.convert.project import find_modules
    from distrun.errors import InputError

    try:
        modules = [path for path, _ in find_modules(Path(script))]
    except InputError:
        return None
    for path in modules:
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        line = _unguarded_spawn(tree)
        if line is not None:
            where = f"{script if path == modules[0] else path}:{line}"
            return Finding("spawn-under-launcher", "calls torch.multiprocessing's spawn: "
                           "each process the launcher starts would start its own", where)
    return None


def _unguarded_spawn(tree: ast.Module) -> int | None:
    spawns = _spawn_names(tree)
    if not spawns:
        return None
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in spawns:
            guard: ast.AST | None = parents.get(node)
            while guard is not None and not (
                    isinstance(guard, ast.If) and _reads_launcher(guard.test)):
                guard = parents.get(guard)
            if guard is None:
                return node.lineno
    return None


def _spawn_names(tree: ast.Module) -> set[str]:
    """How this module names torch.multiprocessing's spawn functions (`mp.spawn`,
    `torch.multiprocessing.spawn`, a `spawn` imported from it)."""
    names = {f"torch.multiprocessing.{f}" for f in SPAWNS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch.multiprocessing" and alias.asname:
                    names |= {f"{alias.asname}.{f}" for f in SPAWNS}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            for alias in node.names:
                if alias.name == "multiprocessing":
                    names |= {f"{alias.asname or alias.name}.{f}" for f in SPAWNS}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.multiprocessing":
            names |= {alias.asname or alias.name for alias in node.names
                      if alias.name in SPAWNS}
    return names


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _reads_launcher(test: ast.AST) -> bool:
    """An `if` test reading the launcher's environment (`"LOCAL_RANK" in os.environ`,
    `os.environ.get("RANK")`, `dist.is_torchelastic_launched()`)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in LAUNCHER_VARIABLES):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "is_torchelastic_launched":
            return True
    return False


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
                         source: str = "", flags: frozenset[str] = frozenset(),
                         typed: list[str] | None = None) -> Finding | None:
    """A distrun option among the script's arguments (unless the script itself mentions
    it, as its own option). With `typed` (the words after `distrun`, as the user typed
    them), the fix is that command with the option moved before SCRIPT."""
    for number, arg in enumerate(args):
        if arg == "--":
            return None
        name = arg.split("=", 1)[0]
        if name in options and name not in source:
            taken = 1 if "=" in arg or name in flags or number + 1 == len(args) else 2
            moved = list(args[number:number + taken])
            return Finding("options-after-script", f"{arg} comes after the script: it is "
                           "passed to the script, not to distrun", script,
                           _moved_before(typed, script, args, number, moved))
    return None


def _moved_before(typed: list[str] | None, script: str, args: tuple[str, ...], number: int,
                  moved: list[str]) -> str:
    """The user's command with `moved` (the words at args[number:]) before SCRIPT."""
    import shlex

    tail = [script, *args]
    if not typed or len(typed) < len(tail) or typed[len(typed) - len(tail):] != tail:
        return ""
    head = typed[:len(typed) - len(tail)]
    rest = [*args[:number], *args[number + len(moved):]]
    command = shlex.join(["distrun", *head, *moved, script, *rest])
    return f"put distrun's options before SCRIPT: `{command}`"
