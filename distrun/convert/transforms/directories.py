"""Directories: every rank creates them without tripping over the others.

  os.makedirs(path)           ->  os.makedirs(path, exist_ok=True)
  os.mkdir(path)              ->  os.makedirs(path, exist_ok=True)
  pathlib.Path(p).mkdir(...)  ->  pathlib.Path(p).mkdir(..., exist_ok=True)

Every rank runs the same code, so the first rank to create a directory makes every
other rank's `mkdir` fail with FileExistsError, also behind `if not
os.path.exists(path):` (another rank can create it between the check and the call).
Guarding the creation with `if RANK == 0:` would only move the race (the other ranks
may write into it before it exists); with exist_ok=True each rank may create it and
none fails when another was first.

Won't: change a call that passes exist_ok=False or a computed exist_ok (reported:
the script wants a new directory, which all ranks but one cannot have), or an
`os.mkdir` with dir_fd.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional
from distrun.convert.build import Rewrite, append_keyword, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import method_name

_PATHS = frozenset({"pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath"})
# Where exist_ok sits among the positional arguments, by function.
_EXIST_OK_AT = {"os.makedirs": 2, "os.mkdir": None, "mkdir": 2}


def plan_directories(ctx: Context) -> None:
    facts = ctx.facts
    for call in facts.calls:
        name = facts.call_name(call)
        if name in ("os.makedirs", "os.mkdir"):
            _exist_ok(ctx, call, name)
        elif method_name(call) == "mkdir" and _is_path(facts, call):
            _exist_ok(ctx, call, "mkdir")


TRANSFORM = Transform("directories", plan_directories)


def _is_path(facts: Facts, call: cst.Call) -> bool:
    """`Path(p).mkdir(...)`, or `x.mkdir(parents=..., exist_ok=...)`: pathlib's own
    keywords say it is a path whatever `x` is."""
    assert isinstance(call.func, cst.Attribute)
    receiver = call.func.value
    return (isinstance(receiver, cst.Call) and facts.call_name(receiver) in _PATHS) or any(
        keyword(call, k) is not None for k in ("parents", "exist_ok"))


def _exist_ok(ctx: Context, call: cst.Call, name: str) -> None:
    facts, plan = ctx.facts, ctx.plan
    given = keyword(call, "exist_ok")
    at = _EXIST_OK_AT[name]
    if given is None and at is not None and len(positional(call)) > at:
        given = positional(call)[at]
    if given is not None:
        if dotted(given.value) != "True":
            _exist_ok_when_several(ctx, call, given)
        return
    if keyword(call, "dir_fd") is not None:
        plan.finding(call, "directories.dir_fd",
                     "`os.mkdir(..., dir_fd=...)` run by every rank: all "
                     "but the first fail", "let the others find it there: "
                     "`with contextlib.suppress(FileExistsError):` around it")
        return
    plan.rewrite(call, _with_exist_ok(ctx, call, name))
    shown = facts.code(call.func)
    new = shown if name != "os.mkdir" else _makedirs(ctx, call)
    plan.change(call, "directories.exist_ok",
                f"`{shown}(...)` -> `{new}(..., exist_ok=True)`: every "
                "rank creates the directory; none fails when another was first")


def _exist_ok_when_several(ctx: Context, call: cst.Call, given: cst.Arg) -> None:
    """exist_ok=False (or computed): the script wants a new folder; one process keeps that
    check, several take the folder whichever of them made it."""
    world = ctx.names.world_size
    old = ctx.facts.code(given.value)
    new = f"{world} > 1" if old == "False" else f"({old}) or {world} > 1"
    ctx.plan.rewrite(given.value, lambda _n: expression(new))
    ctx.plan.change(call, "directories.exist_ok", f"`exist_ok={old}` -> `exist_ok={new}`: with "
                    "several processes every rank creates the folder and none fails because "
                    "another was first (one process still refuses an existing one)")


def _makedirs(ctx: Context, call: cst.Call) -> str:
    """The `makedirs` to call in place of `os.mkdir` (through the script's own `os`)."""
    if isinstance(call.func, cst.Attribute):
        return f"{ctx.facts.code(call.func.value)}.makedirs"
    ctx.need("os", at=call)
    return f"{ctx.names.os}.makedirs"


def _with_exist_ok(ctx: Context, call: cst.Call, name: str) -> Rewrite:
    func = expression(_makedirs(ctx, call)) if name == "os.mkdir" else None

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        if func is not None:
            node = node.with_changes(func=func)
        return append_keyword(node, "exist_ok", cst.Name("True"))

    return rewrite
