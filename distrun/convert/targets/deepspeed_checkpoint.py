"""DeepSpeed checkpoints for `--to deepspeed`: the optimizer's state goes through the engine.

Under ZeRO each rank holds a shard of the optimizer's state, so a `torch.save` of
`optimizer.state_dict()` by rank 0 cannot resume the optimizer. Where the script saves
its optimizer's state, every rank also saves the engine's (its shard and the weights):

    torch.save({..., "optimizer": optimizer.state_dict()}, path)
                 ->  (rank 0's file, as before: its `model` entry loads into the original)
                     engine.save_checkpoint(f"{path}.deepspeed", tag="zero")   (every rank)

and where it loads it back, the engine loads its shards:

    ckpt = torch.load(path)                 ckpt = torch.load(path)
    optimizer.load_state_dict(ckpt["opt"])  ->  if not os.path.isdir(f"{path}.deepspeed"):
                                                    raise FileNotFoundError(...)
                                                engine.load_checkpoint(f"{path}.deepspeed",
                                                                       tag="zero")

A missing DeepSpeed checkpoint raises with its path (without a tag DeepSpeed only logs a
warning and trains from where it is; with one it fails an assert). The engine is made
before the load (see `initialize`). A save the engine cannot reach with a path it can
re-read is reported; a load whose file cannot be traced to its `torch.load` is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from distrun.convert.analysis import positional
from distrun.convert.build import expression, statement
from distrun.convert.context import Context
from distrun.convert.idioms import method_name

TAG = "zero"
IsOptimizer = Callable[[Context, cst.Call], bool]
EngineAt = Callable[[Context, cst.CSTNode], "str | None"]
SUFFIX = ".deepspeed"


def optimizer_loads(ctx: Context, is_optimizer: IsOptimizer) -> list[cst.Call]:
    return [c for c in ctx.facts.calls
            if method_name(c) == "load_state_dict" and is_optimizer(ctx, c)]


def load_path(ctx: Context, call: cst.Call) -> str | None:
    """The path the state `optimizer.load_state_dict(state)` loads came from: `P` of the
    one `name = torch.load(P, ...)` that `state` (`name`, `name["key"]`) reads, in the
    same function; None when it cannot be told or P is not plain to re-read."""
    facts = ctx.facts
    args = positional(call)
    if len(args) != 1:
        return None
    root: cst.BaseExpression = args[0].value
    while isinstance(root, (cst.Subscript, cst.Attribute)):
        root = root.value
    if not isinstance(root, cst.Name):
        return None
    func = facts.function(call)
    loads = []
    for node in facts.names:
        parent = facts.parent.get(node)
        assign = facts.parent.get(parent) if isinstance(parent, cst.AssignTarget) else None
        if node.value == root.value and isinstance(assign, cst.Assign) \
                and facts.function(assign) is func:
            loads.append(assign.value)
    if len(loads) != 1 or not isinstance(loads[0], cst.Call) \
            or facts.call_name(loads[0]) != "torch.load" or not positional(loads[0]):
        return None
    path = positional(loads[0])[0].value
    return directory(facts.code(path), path) if _plain(path) else None


def directory(code: str, expr: cst.BaseExpression) -> str:
    """Code for the engine's checkpoint folder beside the file `expr` (code `code`)."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        if isinstance(value, str) and '"' not in value and "\\" not in value:
            return f'"{value}{SUFFIX}"'
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return f'f"{{{code}}}{SUFFIX}"'
    return f'str({code}) + "{SUFFIX}"'


def _plain(expr: cst.BaseExpression) -> bool:
    """Can `expr` be evaluated again with the same result (no call in it)?"""
    if isinstance(expr, (cst.Name, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Attribute):
        return _plain(expr.value)
    if isinstance(expr, cst.FormattedString):
        return all(_plain(p.expression) for p in expr.parts
                   if isinstance(p, cst.FormattedStringExpression))
    if isinstance(expr, cst.BinaryOperation):
        return _plain(expr.left) and _plain(expr.right)
    return False


def convert_load(ctx: Context, call: cst.Call, engine: str, path: str) -> None:
    stmt = ctx.facts.statement(call)
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        ctx.refuse(call, "deepspeed.checkpoint_load",
                   "the optimizer's state is loaded on a line with other statements",
                   "put `optimizer.load_state_dict(...)` on its own line, then convert again")
        return
    ctx.need("os", at=stmt)
    ctx.plan.insert_before(stmt, [statement(
        f"if not {ctx.names.os}.path.isdir({path}):\n"
        f'    raise FileNotFoundError({path} + ": no DeepSpeed checkpoint to resume the '
        'optimizer from")\n')])
    ctx.plan.rewrite(call, lambda _n: expression(
        f'{engine}.load_checkpoint({path}, tag="{TAG}")'))
    ctx.plan.change(call, "deepspeed.checkpoint_load", f"`{ctx.facts.code(call)}` -> "
                    f"`{engine}.load_checkpoint({path})`: each rank loads its "
                    "ZeRO shard of the optimizer's state (and the weights); a missing one raises")


def convert_saves(ctx: Context, is_optimizer: IsOptimizer, engine_at: EngineAt) -> None:
    """Every rank saves the engine's checkpoint where rank 0 saves the optimizer's state."""
    facts = ctx.facts
    for call in facts.calls:
        if facts.call_name(call) != "torch.save" or len(positional(call)) < 2:
            continue
        states = [c for c in facts.calls_in(positional(call)[0].value)
                  if method_name(c) == "state_dict" and is_optimizer(ctx, c)]
        if not states:
            continue
        path = positional(call)[1].value
        sites = _sites(ctx, call, path, engine_at)
        if not sites:
            ctx.plan.finding(call, "deepspeed.checkpoint_save",
                             "under ZeRO the optimizer's state_dict() holds "
                             "this rank's shard only, and no DeepSpeed engine can be reached "
                             "here to save the whole state: this checkpoint cannot resume the "
                             "optimizer", "save with `engine.save_checkpoint(dir)` on every "
                             "rank and resume with `engine.load_checkpoint(dir)`")
            continue
        for stmt, engine, folder in sites:
            ctx.plan.insert_after(stmt, [statement(
                f'{engine}.save_checkpoint({folder}, tag="{TAG}")  # every rank: its ZeRO '
                "shard of the optimizer's state\n")])
        ctx.plan.change(call, "deepspeed.checkpoint_save",
                        f"the optimizer's state is saved: every rank also "
                        f"saves the engine's checkpoint in `{sites[0][2]}` "
                        "(rank 0's file keeps the weights, loadable into the original model; "
                        "its optimizer entry is " + ("None under ZeRO-3)" if ctx.options.zero
                                                     == 3 else "rank 0's shard only)"))


def _sites(ctx: Context, save: cst.Call, path: cst.BaseExpression, engine_at: EngineAt
           ) -> list[tuple[cst.CSTNode, str, str]]:
    """Where to save the engine's checkpoint: after the save itself when the engine is
    reachable there, else after each call of the function that saves, with the path as
    the caller passes it. Empty when a path cannot be re-read."""
    facts = ctx.facts
    stmt = facts.statement(save)
    if stmt is None or not _plain(path):
        return []
    engine = engine_at(ctx, save)
    if engine is not None:
        return [(stmt, engine, directory(facts.code(path), path))]
    func = facts.function(save)
    if func is None or facts.function(func) is not None:
        return []
    params = [p.name.value for p in func.params.params]
    names = {n.value for n in facts.names if facts.inside(n, path)}
    local = {n.value for n in facts.names if facts.function(n) is func
             and isinstance(facts.parent.get(n), cst.AssignTarget)}
    sites: list[tuple[cst.CSTNode, str, str]] = []
    for call in facts.calls:
        if facts.call_name(call) != func.name.value:
            continue
        engine, where = engine_at(ctx, call), facts.statement(call)
        if engine is None or where is None:
            return []
        if isinstance(path, cst.Name) and path.value in params:
            index = params.index(path.value)
            given = [a.value for a in call.args if a.keyword is not None
                     and a.keyword.value == path.value] or \
                [a.value for a in positional(call)[index:index + 1]]
            if not given or not _plain(given[0]):
                return []
            sites.append((where, engine, directory(facts.code(given[0]), given[0])))
        elif names & local:
            return []
        else:
            sites.append((where, engine, directory(facts.code(path), path)))
    return sites
