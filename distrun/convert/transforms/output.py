"""Output: print, logging, progress bars and trackers on global rank 0 only.

Rewrites:
  print(...) / logging.info(...) / logger.warning(...)   ->  if RANK == 0: <the same line>
  tqdm(iterable, ...)                                     ->  tqdm(iterable, ..., disable=RANK != 0)
  writer = SummaryWriter(...) / run = wandb.init(...)    ->  ... if RANK == 0 else None
  writer.add_scalar(...) / wandb.log(...) / save_image(...) / plt.savefig(...)
                                                          ->  if RANK == 0: <the same line>

Won't: guard a print whose arguments call the script's own functions (they may run
collectives every rank must join): reported with the fix. Won't touch a print that
shares its line with other statements.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, string_value
from distrun.convert.build import append_keyword, code_of, expression, guard_rank0
from distrun.convert.context import Context, Transform
from distrun.convert.flow import Place

_LOG_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical",
                         "log"})
_TQDM = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.trange",
                   "tqdm.auto.trange", "tqdm.notebook.trange"})
_WRITERS = frozenset({"torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter",
                      "torch.utils.tensorboard.writer.SummaryWriter"})
_ERROR_LEVELS = frozenset({"error", "exception", "critical"})
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
_RANK0_CALLS = frozenset({"wandb.log", "wandb.finish", "wandb.watch", "wandb.save",
                          "torchvision.utils.save_image", "matplotlib.pyplot.savefig",
                          "mlflow.log_metric", "mlflow.log_metrics", "mlflow.log_param"})


def plan_output(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    loggers = _names_assigned_from(facts, {"logging.getLogger"})
    writers = _names_assigned_from(facts, _WRITERS)
    writer_roots = _roots_assigned_from(ctx, _WRITERS)
    rank = ctx.names.rank
    guarded = _plan_file_writes(ctx)
    for call in facts.calls:
        if any(id(a) in guarded for a in facts.ancestors(call)):
            continue  # inside a block already run by rank 0 only
        name = facts.call_name(call) or ""
        func = call.func
        owner = dotted(func.value) if isinstance(func, cst.Attribute) else None
        attr = func.attr.value if isinstance(func, cst.Attribute) else None
        if name == "print":
            _guard(ctx, call, "print")
        elif (name.startswith("logging.") or owner in loggers) and attr in _LOG_LEVELS:
            if attr in _ERROR_LEVELS:
                continue  # an error is said by the rank that meets it
            _guard(ctx, call, "logging")
        elif owner in writers or _held_in(ctx, func, writer_roots) or name in _RANK0_CALLS:
            _guard(ctx, call, "tracking")
        elif name in _TQDM:
            _disable_bar(ctx, call)
        elif name == "wandb.init":
            _wandb_disabled_elsewhere(ctx, call)
        elif name in _WRITERS:
            parent = facts.parent.get(call)
            if isinstance(parent, cst.Assign) and parent.value is call:
                plan.rewrite(call, lambda n: expression(f"{code_of(n)} if {rank} == 0 else None"))
                plan.change(call, "output", f"`{name.rsplit('.', 1)[-1]}` created on rank 0 only "
                            "(each use of it too)")
            else:
                _guard(ctx, call, "tracking")


TRANSFORM = Transform("output", plan_output)


def _names_assigned_from(facts: Facts, callees: set[str] | frozenset[str]) -> set[str]:
    names = set()
    for call in facts.calls:
        if facts.call_name(call) in callees:
            parent = facts.parent.get(call)
            if isinstance(parent, cst.Assign) and parent.value is call:
                names |= {c for t in parent.targets if (c := dotted(t.target))}
    return names


def _plan_file_writes(ctx: Context) -> set[int]:
    """`with open(path, "w") as f: ...` (or "a", "x"): every rank would write the same
    file; the block runs on rank 0 when it only writes (no function of the script, no
    checkpoint). A file opened for writing otherwise is reported. Returns the ids of the
    blocks now run by rank 0."""
    facts, plan, rank = ctx.facts, ctx.plan, ctx.names.rank
    guarded: set[int] = set()
    for call in facts.calls:
        if facts.call_name(call) not in ("open", "io.open") or not _writes(call):
            continue
        item = facts.parent.get(call)
        block = facts.parent.get(item) if isinstance(item, cst.WithItem) else None
        if isinstance(block, cst.With) and not _does_more_than_write(ctx, block):
            plan.rewrite(block, lambda n: guard_rank0(n, rank))
            plan.change(call, "output", "file written by rank 0 only (every rank would write "
                        "the same file)")
            guarded.add(id(block))
        elif not (isinstance(block, cst.With) and any(
                facts.call_name(c) == "torch.save" for c in facts.calls_in(block))):
            plan.finding(call, "output", f"`{facts.code(call)}`: every rank writes this file",
                         f"write it on one rank: `if {rank} == 0:` around the writing")
    return guarded


def _writes(call: cst.Call) -> bool:
    mode = keyword(call, "mode") or (call.args[1] if len(call.args) > 1 and
                                     call.args[1].keyword is None else None)
    text = string_value(mode.value) if mode is not None else None
    return text is not None and any(c in text for c in "wax")


def _does_more_than_write(ctx: Context, block: cst.With) -> bool:
    """Does the block call a function of the script, a model, or save a checkpoint?"""
    return any(ctx.flow.callee(c) is not None or id(c) in ctx.ddp_calls
               or (ctx.facts.call_name(c) or "").startswith(("torch.save", "torch.distributed"))
               for c in ctx.facts.calls_in(block.body))


def _roots_assigned_from(ctx: Context, callees: frozenset[str]) -> set[Place]:
    """The places (with every alias: `self.writer`, a parameter...) holding objects made
    by `callees`."""
    roots = set()
    for call in ctx.facts.calls:
        parent = ctx.facts.parent.get(call)
        if ctx.facts.call_name(call) in callees and isinstance(parent, cst.Assign):
            for target in parent.targets:
                place = ctx.flow.place_of(target.target)
                if place is not None:
                    roots.add(ctx.flow.root(place))
    return roots


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
    ctx.plan.change(call, "output", "wandb run disabled on every rank but 0 (`mode=\"disabled\"`): "
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
            if isinstance(value, cst.Call) and facts.call_name(value) in _EXITS and not (
                    value.args and dotted(value.args[0].value) in ("0", "None")):
                return True
    return False


def _guard(ctx: Context, call: cst.Call, what: str) -> None:
    facts, plan, rank = ctx.facts, ctx.plan, ctx.names.rank
    stmt = facts.statement(call)
    if stmt is not None and _on_error_path(ctx, stmt):
        plan.finding(call, "output", f"this {what} line says why the script stops: left on "
                     "every rank, so a rank that fails says why", severity="info")
        return
    if not (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and stmt.body[0].value is call
    ):
        plan.finding(call, "output", f"this {what} call is not alone on its line: every rank "
                     "runs it", f"put it on its own line under `if {rank} == 0:`")
        return
    own = [c for c in facts.calls_in(call) if c is not call and facts.callee(c) is not None]
    if own:
        fn = facts.code(own[0].func)
        plan.finding(call, "output", f"this {what} line calls `{fn}()`, which may run on every "
                     "rank; left unguarded, so every rank prints it",
                     f"compute the value first, then print it under `if {rank} == 0:`")
        return
    plan.rewrite(stmt, lambda n: guard_rank0(n, rank))
    plan.change(call, "output", f"{what} on rank 0 only")


def _disable_bar(ctx: Context, call: cst.Call) -> None:
    rank = ctx.names.rank
    existing = keyword(call, "disable")

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        if existing is not None:
            args = [
                a.with_changes(value=expression(f"({code_of(a.value)}) or {rank} != 0"))
                if a.keyword is not None and a.keyword.value == "disable" else a
                for a in node.args
            ]
            return node.with_changes(args=args)
        return append_keyword(node, "disable", expression(f"{rank} != 0"))

    ctx.plan.rewrite(call, rewrite)
    ctx.plan.change(call, "output", "progress bar shown on rank 0 only")
