"""Output: print, logging, progress bars and trackers on global rank 0 only.

Rewrites:
  print(...) / logging.info(...) / logger.warning(...)   ->  if RANK == 0: <the same line>
  sys.stdout.write(...) (a hand-made progress bar)        ->  if RANK == 0: <the same line>
  print handed on as a value (`trace_func=print`, `log = print`)
                       ->  (print if RANK == 0 else (lambda *args, **kwargs: None))
  tqdm(iterable, ...)                                     ->  tqdm(iterable, ..., disable=RANK != 0)
  tqdm.write(...) / bar.write(...)                        ->  if RANK == 0: <the same line>
  writer = SummaryWriter(...) (a tracker's run too)       ->  ... if RANK == 0 else Rank0Only()
                    (a stand-in that answers every use on the other ranks: other_ranks.py)
  run = wandb.init(...)                         ->  ..., mode=None if RANK == 0 else "disabled")
  writer.add_scalar(...) / wandb.log(...) / save_image(...) / plt.savefig(...)
                                                          ->  if RANK == 0: <the same line>
  logging.FileHandler(path, mode="w")   ->  ..., mode="w" if RANK == 0 else "a", delay=RANK != 0)

Won't: guard a print whose arguments call the script's own functions (they may run
collectives every rank must join): reported with the fix. Won't touch a print that
shares its line with other statements.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert import other_ranks
from distrun.convert.analysis import Facts, dotted, keyword
from distrun.convert.build import (
    append_keyword,
    code_of,
    expression,
    guard_rank0,
)
from distrun.convert.context import Context, Transform
from distrun.convert.file_modes import kept_file, opens_for_writing
from distrun.convert.object_flow import Place
from distrun.convert.transforms.checkpoint import made_when_missing
from distrun.convert.transforms.hydra_runs import rank0_run_folder
from distrun.convert.transforms.progress_bars import disable_bar

_LOG_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical",
                         "log"})
_TQDM = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.trange",
                   "tqdm.auto.trange", "tqdm.notebook.trange"})
_TQDM_WRITES = frozenset(f"{bar}.write" for bar in _TQDM)  # printed whether the bar shows
# Handlers made here write to the console and to files: on every rank, each record
# would be printed (and the log file written) once per rank. The other ranks keep
# Python's default: their warnings and errors still reach stderr.
_LOGGING_SETUP = frozenset({"logging.config.dictConfig", "logging.config.fileConfig",
                            "logging.basicConfig"})
_ERROR_LEVELS = frozenset({"error", "exception", "critical"})
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
# Progress written straight to the console (hand-made progress bars): output like print.
_STREAM_WRITES = frozenset({"sys.stdout.write", "sys.stderr.write", "sys.stdout.flush",
                            "sys.stderr.flush",
                            # pretty-printers: output like print (`pprint(vars(args))`)
                            "pprint.pprint", "pprint.pp", "rich.print", "rich.pretty.pprint"})
_RANK0_CALLS = frozenset({"wandb.log", "wandb.finish", "wandb.watch", "wandb.save",
                          "torchvision.utils.save_image", "matplotlib.pyplot.savefig",
                          "mlflow.log_metric", "mlflow.log_metrics", "mlflow.log_param"})

# A figure's own `savefig` (`fig = plt.figure()` ... `fig.savefig(path)`) writes like pyplot's.
_FIGURES = frozenset({"matplotlib.pyplot.figure", "matplotlib.pyplot.subplots",
                      "matplotlib.pyplot.gcf"})


def plan_output(ctx: Context) -> None:
    facts = ctx.facts
    loggers = _names_assigned_from(facts, {"logging.getLogger"})
    loggers |= _loggers_from_factories(facts, loggers)
    writers = _names_assigned_from(facts, other_ranks.OBJECTS)
    writer_roots = _roots_assigned_from(ctx, other_ranks.OBJECTS)
    bars = _names_assigned_from(facts, _TQDM)
    figures = _names_assigned_from(facts, _FIGURES)
    guarded = _plan_file_writes(ctx)
    for call in facts.calls:
        if any(id(a) in guarded for a in facts.ancestors(call)):
            continue  # inside a block already run by rank 0 only
        name = facts.call_name(call) or ""
        func = call.func
        owner = dotted(func.value) if isinstance(func, cst.Attribute) else None
        attr = func.attr.value if isinstance(func, cst.Attribute) else None
        if name == "print" or name in _STREAM_WRITES or name in _TQDM_WRITES or (
                owner in bars and attr == "write"):
            _guard(ctx, call, "print")
        elif name in _LOGGING_SETUP:
            if not _before_main_guard(ctx, call):  # guarding it there would move the set-up
                _guard(ctx, call, "logging set-up")
            else:
                other_ranks.plan_log_file(ctx, call, name)
        elif name in other_ranks.FILE_HANDLERS:
            other_ranks.plan_log_file(ctx, call, name)
        elif (name.startswith("logging.") or owner in loggers) and attr in _LOG_LEVELS:
            if attr in _ERROR_LEVELS:
                continue  # an error is said by the rank that meets it
            _guard(ctx, call, "logging")
        elif owner in figures and attr == "savefig":
            _guard(ctx, call, "figure file written")
        elif owner in writers or _held_in(ctx, func, writer_roots) or name in _RANK0_CALLS:
            if _held_in(ctx, func, writer_roots) and not _alone(facts, call):
                continue  # its value is used: on the other ranks, the stand-in answers
            _guard(ctx, call, "tracking")
        elif name in _TQDM:
            disable_bar(ctx, call)
        elif name == "wandb.init":
            _wandb_disabled_elsewhere(ctx, call)
        elif name in other_ranks.OBJECTS:
            other_ranks.plan_object(ctx, call, name, _guard)
    _print_as_value(ctx)
    _log_as_value(ctx, loggers)
    rank0_run_folder(ctx)


TRANSFORM = Transform("output", plan_output)


def _print_as_value(ctx: Context) -> None:
    """`print` handed on as a value (a default argument `trace_func=print`, `log = print`,
    a callback): whoever calls it later prints on every rank. On the other ranks it is a
    function that prints nothing."""
    facts, rank = ctx.facts, ctx.names.rank
    if "print" in facts.bound_names:
        return  # a `print` of the script's own
    for node in facts.names:
        if node.value != "print":
            continue
        parent = facts.parent.get(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            continue  # a call: the guards above
        if isinstance(parent, (cst.Attribute, cst.AssignTarget, cst.ImportAlias)) or (
                isinstance(parent, cst.Param) and parent.name is node):
            continue
        code = f"(print if {rank} == 0 else (lambda *args, **kwargs: None))"
        ctx.plan.rewrite(node, lambda _n, code=code: expression(code))  # type: ignore[misc]
        ctx.plan.change(node, "output.print_value",
                        "`print` handed on as a value: it prints on rank 0 only (a function "
                        "that prints nothing on the other ranks)")


def _log_as_value(ctx: Context, loggers: set[str]) -> None:
    """A logger's method handed on as a value (pt.darts' `config.print_params(
    logger.info)`): whoever calls it logs on every rank, into a file the others were to
    open only if they log. On the other ranks it is a function that logs nothing."""
    facts, rank = ctx.facts, ctx.names.rank
    for node in facts.attributes:
        parent = facts.parent.get(node)
        if dotted(node.value) not in loggers or node.attr.value not in _LOG_LEVELS or \
                node.attr.value in _ERROR_LEVELS or isinstance(parent, cst.Attribute) or (
                isinstance(parent, cst.Call) and parent.func is node) or isinstance(
                parent, cst.AssignTarget):
            continue
        ctx.plan.rewrite(node, lambda n, r=rank: expression(
            f"({code_of(n)} if {r} == 0 else (lambda *args, **kwargs: None))"))  # type: ignore[misc]
        ctx.plan.change(node, "output.print_value", f"`{facts.code(node)}` handed on as a "
                        "value: it logs on rank 0 only (a function that logs nothing on the "
                        "other ranks)")


def _before_main_guard(ctx: Context, node: cst.CSTNode) -> bool:
    """At the top level of an entry script that has a main guard, outside it (its loggers'
    calls are guarded one by one; guarding this line would start the processes' set-up at
    import time)."""
    entry = ctx.facts.entry
    top = ctx.facts.top_level_statement(node)
    return (ctx.facts.module_of(node) is entry and entry.main_guard is not None
            and top is not entry.main_guard and not isinstance(
                top, (cst.FunctionDef, cst.ClassDef)))


def _loggers_from_factories(facts: Facts, loggers: set[str]) -> set[str]:
    """`self.logger = get_logger(args.log_dir)` where the project's get_logger returns
    what `logging.getLogger(...)` made (AGCRN's lib/logger.py): a logger too."""
    factories = set()
    for node in facts.returns:
        func = facts.function(node)
        value = node.value
        if func is not None and value is not None and (dotted(value) in loggers or (
                isinstance(value, cst.Call) and facts.call_name(value) == "logging.getLogger")):
            factories.add(id(func))
    return {code for call in facts.calls
            if id(facts.local_definition(call)) in factories
            for target in other_ranks.bound_to(facts, call) if (code := dotted(target))}


def _names_assigned_from(facts: Facts, callees: set[str] | frozenset[str]) -> set[str]:
    """The names and attributes that hold objects made by `callees` (`x = f()`, `with f()
    as x`)."""
    return {code for call in facts.calls if facts.call_name(call) in callees
            for target in other_ranks.bound_to(facts, call) if (code := dotted(target))}


def _plan_file_writes(ctx: Context) -> set[int]:
    """`with open(path, "w") as f: ...` (or "a", "x"): every rank would write the same
    file; the block runs on rank 0 when it only writes (no function of the script, no
    checkpoint). A file opened for writing otherwise is reported. Returns the ids of the
    blocks now run by rank 0."""
    facts, plan, rank = ctx.facts, ctx.plan, ctx.names.rank
    guarded: set[int] = set()
    for call in facts.calls:
        if not opens_for_writing(ctx, call) or made_when_missing(facts, facts.statement(call)):
            continue  # a cache made when missing: rank 0 makes it first (checkpoint.py)
        item = facts.parent.get(call)
        block = facts.parent.get(item) if isinstance(item, cst.WithItem) else None
        if isinstance(block, cst.With) and not _does_more_than_write(ctx, block):
            plan.rewrite(block, lambda n: guard_rank0(n, rank))
            plan.change(call, "output.rank0_file",
                        "file written by rank 0 only (every rank would write "
                        "the same file)")
            guarded.add(id(block))
        elif kept_file(ctx, call, block):
            guarded.add(id(call))
        elif not (isinstance(block, cst.With) and any(
                facts.call_name(c) == "torch.save" for c in facts.calls_in(block))):
            plan.finding(call, "output.rank0_file",
                         f"`{facts.code(call)}`: every rank writes this file",
                         f"write it on one rank: `if {rank} == 0:` around the writing")
    return guarded


def _does_more_than_write(ctx: Context, block: cst.With) -> bool:
    """Does the block save a checkpoint, run a model, or call a function of the script
    that (a few calls deep) runs a collective or saves? Then it cannot run on rank 0
    alone."""
    return _may_sync(ctx, block.body, set(), 0)


_SYNCING = ("torch.save", "torch.distributed")
MAX_DEPTH = 4  # calls of the script's functions followed; deeper counts as syncing


def _may_sync(ctx: Context, container: cst.CSTNode, seen: set[int], depth: int) -> bool:
    for call in ctx.facts.calls_in(container):
        name = ctx.facts.call_name(call) or ""
        if ctx.wrapper_called(call) is not None or name.startswith(_SYNCING) \
                or name in other_ranks.WRITERS:  # its folder may be sent to every rank
            return True
        found = ctx.flow.callee(call)
        if found is None or id(found[0]) in seen:
            continue
        seen.add(id(found[0]))
        if depth >= MAX_DEPTH or _may_sync(ctx, found[0].body, seen, depth + 1):
            return True
    return False


def _roots_assigned_from(ctx: Context, callees: frozenset[str]) -> set[Place]:
    """The places (with every alias: `self.writer`, a parameter...) holding objects made
    by `callees`."""
    return {ctx.flow.root(place) for call in ctx.facts.calls
            if ctx.facts.call_name(call) in callees
            for target in other_ranks.bound_to(ctx.facts, call)
            if (place := ctx.flow.place_of(target)) is not None}


def _held_in(ctx: Context, func: cst.BaseExpression, roots: set[Place]) -> bool:
    if not roots or not isinstance(func, cst.Attribute):
        return False
    place = ctx.flow.place_of(func.value)
    return place is not None and ctx.flow.root(place) in roots


def _wandb_disabled_elsewhere(ctx: Context, call: cst.Call) -> None:
    """`wandb.init(...)` -> `wandb.init(..., mode=None if RANK == 0 else "disabled")`: every
    rank gets a run object (its methods work everywhere), only rank 0's reports."""
    rank = ctx.names.rank
    given = keyword(call, "mode")

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        if given is None:
            return append_keyword(node, "mode", expression(
                f'None if {rank} == 0 else "disabled"'))
        return node.with_changes(args=[
            a.with_changes(value=expression(f'({code_of(a.value)}) if {rank} == 0 else '
                                            '"disabled"'))
            if a.keyword is not None and a.keyword.value == "mode" else a for a in node.args])

    ctx.plan.rewrite(call, rewrite)
    ctx.plan.change(call, "output.wandb",
                    "wandb run disabled on every rank but 0 (`mode=\"disabled\"`): "
                    "its methods still work there, only rank 0 reports")


def _on_error_path(ctx: Context, stmt: cst.CSTNode) -> bool:
    """Is `stmt` followed, in its block, by an exit with an error or a raise?"""
    facts = ctx.facts
    block = facts.parent.get(stmt)
    siblings = list(getattr(block, "body", []))
    if stmt not in siblings:
        return False
    for later in siblings[siblings.index(stmt) + 1:]:
        if not isinstance(later, cst.SimpleStatementLine):
            continue
        for small in later.body:
            if isinstance(small, cst.Raise):
                return True
            value = small.value if isinstance(small, cst.Expr) else None
            if isinstance(value, cst.Call) and facts.call_name(value) in _EXITS and (
                    value.args and dotted(value.args[0].value) not in ("0", "None")):
                return True  # `sys.exit()` and `sys.exit(0)` end a run that went well
    return False


def _guard(ctx: Context, call: cst.Call, what: str) -> None:
    facts, plan, rank = ctx.facts, ctx.plan, ctx.names.rank
    stmt = facts.statement(call)
    if stmt is not None and _on_error_path(ctx, stmt):
        plan.finding(call, "output.error_line",
                     f"this {what} line says why the script stops: left on "
                     "every rank, so a rank that fails says why", severity="info")
        return
    alone = _alone(facts, call)
    own = _outermost([c for c in facts.calls_in(call)
                      if c is not call and ctx.flow.callee(c) is not None])
    if not alone:
        parent = facts.parent.get(call)
        if own or not isinstance(parent, cst.Expr):
            plan.finding(call, "output.rank0_unguarded",
                         f"this {what} call is not alone on its line: every "
                         "rank runs it", f"put it on its own line under `if {rank} == 0:`")
            return
        plan.rewrite(call, lambda n: expression(f"{code_of(n)} if {rank} == 0 else None"))
        plan.change(call, "output.rank0", f"{what} on rank 0 only (it shares its line: `... if "
                    f"{rank} == 0 else None`)")
        return
    if own and not _hoist(ctx, call, own):
        fn = facts.code(own[0].func)
        plan.finding(call, "output.rank0_unguarded",
                     f"this {what} line calls `{fn}()` where it cannot be "
                     "taken out of the line; left unguarded, so every rank prints it",
                     f"compute the value first, then print it under `if {rank} == 0:`")
        return
    assert stmt is not None
    plan.rewrite(stmt, lambda n: guard_rank0(n, rank))
    if own:
        names = ", ".join(f"`{facts.code(c.func)}()`" for c in own)
        plan.change(call, "output.rank0",
                    f"{what} on rank 0 only; {names} still runs on every rank, "
                    "just before it (it may run collectives, and its side effects stay the "
                    "same on every rank)")
    else:
        plan.change(call, "output.rank0", f"{what} on rank 0 only")


def _alone(facts: Facts, call: cst.Call) -> bool:
    """Is `call` a statement line of its own (its value unused)?"""
    stmt = facts.statement(call)
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is call)


_VERBS = frozenset({"compute", "calc", "calculate", "get", "eval", "evaluate", "measure", "run"})
_DEFERRED = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.IfExp,
             cst.BooleanOperation)


def _outermost(calls: list[cst.Call]) -> list[cst.Call]:
    """The calls not inside another of them (its arguments run with it)."""
    ids = {id(c) for c in calls}
    inside: set[int] = set()
    for call in calls:
        for other in calls:
            if other is not call and id(other) not in inside:
                stack: list[cst.CSTNode] = [other]
                while stack:
                    node = stack.pop()
                    if node is call:
                        inside.add(id(call))
                        break
                    stack.extend(node.children)
    return [c for c in calls if id(c) in ids and id(c) not in inside]


def _hoist(ctx: Context, call: cst.Call, own: list[cst.Call]) -> bool:
    """`print(f"... {evaluate(model)}")` -> `accuracy = evaluate(model)` just before the
    line, the print using the name: the script's function still runs on every rank, in the
    same order as before. Not where a call may not run at all (a lambda, a comprehension,
    `a if c else b`, `x and f()`): False."""
    facts = ctx.facts
    for inner in own:
        for node in facts.ancestors(inner):
            if node is call:
                break
            if isinstance(node, _DEFERRED):
                return False
    stmt = facts.statement(call)
    assert stmt is not None
    for inner in own:
        func = inner.func
        base = func.attr.value if isinstance(func, cst.Attribute) else facts.code(func)
        words = base.strip("_").split("_")
        base = "_".join(words[1:]) if len(words) > 1 and words[0] in _VERBS else base + "_value"
        # as the other rules rewrite it (`evaluate(model)` given the DDP object)
        ctx.plan.hoist(inner, stmt, ctx.names.fresh(base))
    return True
