"""Checkpoints: saved once, by global rank 0, with the plain model's keys; loaded onto
the local device.

Rewrites:
  torch.save(obj, path)    ->  if RANK == 0: torch.save(obj, path)   then   dist.barrier()
  (the same for the saves of libraries that write a model's files: `x.save_pretrained(dir)`
  of Hugging Face models and tokenizers, `torch.jit.save`, safetensors' `save_file` /
  `save_model`: every rank writing the same files tears them)
  torch.save(model, path)  ->  torch.save(model.module, path)   (the wrapped model)
  torch.load(path)         ->  torch.load(path, map_location=DEVICE)
  if os.path.exists(cache): load  else: make; torch.save(made, cache)
                           ->  rank 0 runs the `if` first (making the cache), the others
                               wait, then run it (finding the cache): a file read while
                               rank 0 still writes it is torn

`model.state_dict()` becomes `model.module.state_dict()` through the model transform,
so saved keys carry no `module.` prefix, also inside checkpoint dicts. Won't: guard a
`torch.save` that shares its line with other statements (reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.analysis import Facts, block_body, keyword, positional
from distrun.convert.build import (
    Rewrite,
    append_keyword,
    expression,
    guard_rank0,
    statement,
    with_block,
)
from distrun.convert.context import Context, Transform
from distrun.convert.file_modes import opens_for_writing
from distrun.convert.transforms.rank0_values import rank0_call_code, through_rank0


def plan_checkpoints(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    dev = ctx.names.device
    done = _Done()
    for call in facts.calls:
        name = facts.call_name(call)
        if name == "torch.save" or _library_save(call, name):
            _plan_save(ctx, call, name, done)
        elif (stmt := facts.statement(call)) is not None and writes_file(ctx, call):
            _plan_cache_write(ctx, call, stmt, done)
        elif name == "torch.load" and keyword(call, "map_location") is None:
            if len(positional(call)) >= 2:
                continue
            plan.rewrite(call, _add_map_location(dev))
            plan.change(call, "checkpoint.map_location",
                        f"`torch.load(..., map_location={dev})`: each "
                        "rank loads onto its own device")


def _kept_result(ctx: Context, call: cst.Call, name: str | None,
                 stmt: cst.CSTNode | None) -> bool:
    """`info = bentoml.pytorch.save_model(...)` (a library save whose result the script
    keeps), where every rank passes: `rank0_call(save, ...)` saves on rank 0 and gives
    every rank its result."""
    facts = ctx.facts
    if not (_library_save(call, name) and isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
            and stmt.body[0].value is call and isinstance(call.func, cst.Attribute)) or any(
            isinstance(a, (cst.If, cst.Try, cst.While)) and a is not facts.module_of(a).main_guard
            for a in facts.ancestors(stmt)):
        return False
    n = ctx.names
    ctx.need("dist", at=call)
    ctx.define_helper("rank0_call", call, rank0_call_code(n))
    ctx.plan.rewrite(call, through_rank0(n.rank0_call))
    ctx.plan.change(call, "checkpoint.rank0_save", f"`{_shown(call, name)}` on rank 0 only "
                    f"(`{n.rank0_call}`), its result sent to every rank: every rank would "
                    "write the same files")
    return True


@dataclass
class _Done:
    waits: set[cst.CSTNode] = field(default_factory=set)  # statements a barrier follows
    caches: set[cst.CSTNode] = field(default_factory=set)  # `if`s rank 0 runs first


def _plan_save(ctx: Context, call: cst.Call, name: str | None, done: _Done) -> None:
    facts, plan, rank = ctx.facts, ctx.plan, ctx.names.rank
    stmt = facts.statement(call)
    opened = file_opened_around(facts, stmt) if stmt is not None else None
    if opened is not None:
        stmt = opened  # `with open(path, "wb") as f:` must not run on other ranks
    if opened is None and not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                               and isinstance(stmt.body[0], cst.Expr)):
        if _kept_result(ctx, call, name, stmt):
            return
        plan.finding(call, "checkpoint.rank0_save",
                     f"`{_shown(call, name)}` not alone on its line: every "
                     "rank writes the file", f"save under `if {rank} == 0:` then call "
                     f"`{ctx.target.barrier(ctx, at=call)}`")
        return
    assert stmt is not None
    plan.rewrite(stmt, lambda n: guard_rank0(n, rank))
    if _early_return_cache(ctx, call, stmt, done):
        plan.change(call, "checkpoint.rank0_save", "checkpoint saved by rank 0 only, in the "
                    "block rank 0 runs first")
        return
    barrier = ctx.target.barrier(ctx, at=call)
    after = every_rank_reaches(facts, stmt)
    cache = after in done.caches or (after not in done.waits and _cache_test(facts, after))
    if after not in done.waits and cache:
        done.caches.add(after)
        done.waits.add(after)
        rank0_runs_first(ctx, after, barrier)
        plan.change(after, "checkpoint.cache_first",
                    "rank 0 runs this `if` first (it finds no cache, makes it "
                    "and saves it), the other ranks wait, then load the cache")
    if after not in done.waits:
        done.waits.add(after)
        plan.insert_after(after, [statement(f"{barrier}\n")])
    where = "" if after is stmt else (
        f", the ranks meeting around the `if` of line {facts.line(after)} (rank 0 "
        "runs it first)") if cache else (
        f", after the `if` of line {facts.line(after)} (a point every rank "
        "reaches, whichever branch it takes)")
    then = "" if cache else f", then `{barrier}`"
    plan.change(call, "checkpoint.rank0_save", f"checkpoint saved by rank 0 only{then}"
                f"{where} so no rank reads it before it is written")


def _plan_cache_write(ctx: Context, call: cst.Call, stmt: cst.CSTNode, done: _Done) -> None:
    """A file written in the branch of an `if` taken when it is missing (or after an
    `if exists: return` in the same block): rank 0 runs that first."""
    facts = ctx.facts
    made = made_when_missing(facts, stmt)
    if made is None:
        if _early_return_cache(ctx, call, stmt, done):
            ctx.plan.change(call, "checkpoint.cache_first", f"`{facts.code(call.func)}(...)` "
                            "writes a file made when missing, after an `if` that returns it "
                            "when it exists: rank 0 runs the block from that `if` on first, "
                            "the other ranks wait, then read the file")
        return
    if made not in done.caches:
        done.caches.add(made)
        done.waits.add(made)
        rank0_runs_first(ctx, made, ctx.target.barrier(ctx, at=call))
    ctx.plan.change(call, "checkpoint.cache_first",
                    f"`{facts.code(call.func)}(...)` writes a cache made when missing: rank "
                    f"0 runs the `if` of line {facts.line(made)} first (it finds no file, "
                    "makes and writes it), the other ranks wait, then read the file")


def _early_return_cache(ctx: Context, call: cst.Call, stmt: cst.CSTNode, done: _Done) -> bool:
    """`if os.path.exists(p): return load(p)`, then the making and writing further in the
    same block: the block from that `if` to its end goes inside `with rank0_first():`
    (accelerate: `accelerator.main_process_first()`), whose exit meets the other ranks
    whichever `return` rank 0 takes."""
    region = made_after_early_return(ctx.facts, stmt)
    if region is None:
        return False
    first, last = region
    if first not in done.caches:
        done.caches.add(first)
        done.waits.add(first)
        head = ctx.target.main_process_first(ctx)
        if head is None:
            n = ctx.names
            ctx.need("contextlib", "dist", at=call)
            ctx.define_helper("rank0_first", call, _RANK0_FIRST.format(
                name=n.rank0_first, contextlib=n.contextlib, dist=n.dist))
            head = f"{n.rank0_first}()"
        ctx.plan.wrap(first, last, lambda body: with_block(head, body))
    return True


_RANK0_FIRST = '''

@{contextlib}.contextmanager
def {name}():
    """distrun: rank 0 runs the block first (it makes the file the block reads); the other
    ranks wait at the start until rank 0 is through, then run it."""
    if {dist}.is_initialized() and {dist}.get_rank() != 0:
        {dist}.barrier()
    try:
        yield
    finally:
        if {dist}.is_initialized() and {dist}.get_rank() == 0:
            {dist}.barrier()
'''


TRANSFORM = Transform("checkpoint", plan_checkpoints)

EXISTS = frozenset({"os.path.exists", "os.path.isfile", "os.path.isdir", "exists",
                    "isfile"})


def _cache_test(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` is an `if` whose test asks whether a file exists (`os.path.exists(path)`,
    `Path(p).exists()`, `not ...`): a cache made when missing, loaded when there."""
    return isinstance(node, cst.If) and _asks_exists(facts, node.test)


def _asks_exists(facts: Facts, test: cst.BaseExpression) -> bool:
    found: list[bool] = []

    class Visit(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            name = facts.call_name(call) or ""
            attr = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
            if name in EXISTS or attr in ("exists", "is_file", "isfile"):
                found.append(True)

    test.visit(Visit())
    return bool(found)


# Calls that write the file named by their first argument.
_PATH_WRITERS = frozenset({"numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt"})
_PATH_METHODS = frozenset({"write_text", "write_bytes", "to_csv", "to_parquet", "to_pickle"})


def writes_file(ctx: Context, call: cst.Call) -> bool:
    """`open(p, "wb")` (and the other openers that write), `np.save(p, x)`, `Path.write_text`,
    `df.to_csv(p)`; `pickle.dump(obj, f)` / `json.dump(obj, f)` of a file the script opened
    are its `open(...)`."""
    if ctx.facts.call_name(call) in _PATH_WRITERS:
        return True
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in _PATH_METHODS:
        return True
    return opens_for_writing(ctx, call)


def made_when_missing(facts: Facts, stmt: cst.CSTNode | None) -> cst.If | None:
    """The `if` around `stmt` that tests whether a file exists, when `stmt` is in the branch
    taken when it does not (`if os.path.exists(p): load else: make; write`, or `if not
    os.path.exists(p): make; write`): a cache that rank 0 makes first, the others reading
    it. None elsewhere (a write whatever the test says)."""
    if stmt is None:
        return None
    top = every_rank_reaches(facts, stmt)
    if not isinstance(top, cst.If) or not _cache_test(facts, top):
        return None
    negated = isinstance(top.test, cst.UnaryOperation) and isinstance(top.test.operator, cst.Not)
    if not negated and not (isinstance(top.test, cst.Call) and _asks_exists(facts, top.test)):
        return None  # `if a and exists(p)`: which branch makes the file is not known
    missing = top.body if negated else top.orelse
    if missing is None or not any(node is missing for node in facts.ancestors(stmt)):
        return None
    return top


def made_after_early_return(facts: Facts, stmt: cst.CSTNode
                             ) -> tuple[cst.If, cst.BaseStatement] | None:
    """The region from `if os.path.exists(p): ... return ...` (no `else`) to the end of
    its block, when `stmt` is further in that block: the file is made there when it was
    missing."""
    child: cst.CSTNode = stmt
    for up in facts.ancestors(stmt):
        if isinstance(up, (cst.IndentedBlock, cst.Module)):
            body = list(up.body)
            at = next((i for i, s in enumerate(body) if s is child), None)
            for node in body[:at] if at is not None else []:
                if isinstance(node, cst.If) and node.orelse is None and _cache_test(
                        facts, node) and not (isinstance(node.test, cst.UnaryOperation) and
                                              isinstance(node.test.operator, cst.Not)) \
                        and _ends_in_return(node, raises=False):
                    return node, body[-1]  # (`if not exists(p): raise`: an input checked)
        if isinstance(up, (cst.FunctionDef, cst.ClassDef, cst.For, cst.While)):
            return None
        child = up
    return None


def _ends_in_return(node: cst.CSTNode, raises: bool = True) -> bool:
    """Does every way through `node`'s block end in a `return` (or a `raise`, unless not
    `raises`)? Its last statement returns, or is a `with` or an `if`/`else` whose blocks
    all do."""
    body = getattr(node, "body", None)
    statements = block_body(node)
    last: cst.CSTNode | None = (body.body[-1] if isinstance(body, cst.SimpleStatementSuite)
                                else statements[-1] if statements else None)
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    if isinstance(last, cst.Return) or raises and isinstance(last, cst.Raise):
        return True
    if isinstance(last, cst.With):
        return _ends_in_return(last, raises)
    if isinstance(last, cst.If) and isinstance(last.orelse, (cst.Else, cst.If)):
        return _ends_in_return(last, raises) and _ends_in_return(last.orelse, raises)
    return False


def rank0_runs_first(ctx: Context, node: cst.CSTNode, barrier: str) -> None:
    """Rank 0 runs `node` first; the others wait, then run it (once, whichever transform
    asks: a download and a cache write in the same branch)."""
    if node in ctx.first_runs:
        return
    ctx.first_runs.add(node)
    first = ctx.target.main_process_first(ctx)
    if first is not None:
        def inside(old: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(old, cst.If)
            body = cst.IndentedBlock(body=[old.with_changes(leading_lines=[])])
            return cst.With(items=[cst.WithItem(expression(first))], body=body,
                            leading_lines=old.leading_lines)

        ctx.plan.rewrite(node, inside)
        return
    rank = ctx.names.rank
    ctx.plan.insert_before(node, [statement(
        f"if {rank} != 0:\n    {barrier}  # rank 0 runs the `if` first\n")], lead=True)
    ctx.plan.insert_after(node, [statement(f"if {rank} == 0:\n    {barrier}\n")])


LIBRARY_SAVES = frozenset({"torch.jit.save", "safetensors.torch.save_file",
                           "safetensors.torch.save_model", "torch.onnx.export"})
# model stores: `bentoml.pytorch.save_model(...)`, `mlflow.pytorch.log_model(...)`
_STORE_SAVES = (("bentoml.", (".save_model",)),
                ("mlflow.", (".save_model", ".log_model", ".log_state_dict",
                             "mlflow.log_artifact", "mlflow.log_artifacts")))


def _library_save(call: cst.Call, name: str | None) -> bool:
    """A library call that writes a model's files: `x.save_pretrained(dir)` (transformers,
    peft, diffusers: models, tokenizers, configs), `torch.jit.save`, safetensors', an ONNX
    export, a model store's (BentoML's `save_model`, MLflow's `log_model`)."""
    if name in LIBRARY_SAVES or _store_save(name):
        return True
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "save_pretrained"


def _store_save(name: str | None) -> bool:
    return name is not None and any(name.startswith(prefix) and name.endswith(ends)
                                    for prefix, ends in _STORE_SAVES)


def _shown(call: cst.Call, name: str | None) -> str:
    if name == "torch.save" or name in LIBRARY_SAVES or _store_save(name):
        return str(name)
    return "save_pretrained"


def every_rank_reaches(facts: Facts, stmt: cst.CSTNode) -> cst.CSTNode:
    """The statement after which a collective can follow `stmt` so that every rank meets
    it: `stmt` itself, or the outermost `if` around it in its loop or function (ranks may
    take different branches: a validation loss that differs, a file one rank sees). Never
    past the main guard, which every rank takes (the teardown ends it)."""
    found = stmt
    for node in facts.ancestors(stmt):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.Try,
                             cst.Module)) or node is facts.module_of(node).main_guard:
            break
        if isinstance(node, cst.If) and not isinstance(facts.parent.get(node), cst.If):
            if _every_branch_leaves(node):
                break  # nothing after this `if` runs: the meeting stays in the branch
            found = node  # an `elif` is the orelse of its `if`: its head is the statement
    return found


def _every_branch_leaves(node: cst.If) -> bool:
    """`if ...: return True / elif ...: return True / else: return False`: every branch
    ends in a return or a raise, so no statement after the `if` is ever reached."""
    def leaves(block: cst.BaseSuite) -> bool:
        body = getattr(block, "body", ())
        last = body[-1] if body else None
        if isinstance(last, cst.SimpleStatementLine):
            return isinstance(last.body[-1], (cst.Return, cst.Raise))
        return isinstance(last, cst.If) and _every_branch_leaves(last)

    orelse = node.orelse
    if orelse is None or not leaves(node.body):
        return False
    return _every_branch_leaves(orelse) if isinstance(orelse, cst.If) else leaves(orelse.body)


def file_opened_around(facts: Facts, stmt: cst.CSTNode) -> cst.With | None:
    """The `with open(...)` block a `torch.save(obj, f)` line sits in, if it is all the block
    does: the whole block then runs on rank 0 (opening for writing truncates the file)."""
    parent = facts.parent.get(stmt)
    owner = facts.parent.get(parent) if isinstance(parent, cst.IndentedBlock) else None
    if not isinstance(owner, cst.With) or len(block_body(owner)) != 1:
        return None
    for item in owner.items:
        if isinstance(item.item, cst.Call) and facts.call_name(item.item) in ("open", "io.open"):
            return owner
    return None


def _add_map_location(dev: str) -> Rewrite:
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        return append_keyword(node, "map_location", expression(dev))

    return rewrite
