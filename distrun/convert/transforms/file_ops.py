"""File operations: removing, renaming, moving, copying or writing a shared file on rank 0
only.

Rewrites:
  os.remove(path) / os.unlink / os.rmdir / shutil.rmtree / Path(p).unlink()
  os.rename(a, b) / os.replace / shutil.move / shutil.copy / shutil.copyfile / ...
  np.save(path, x) / np.savetxt / np.savez / df.to_csv(path) / Path(p).write_text(...)
  Image.fromarray(a).save(path) / cv2.imwrite(path, a) / imageio.imwrite / plt.imsave
                                                ->  if RANK == 0: <the same line>

A result file written by a library (a history in .npy, a table in .csv) by every rank
is the same file written at once by each (launch --check: `[shared-write]`); rank 0
writes it. One the script reads back (the same path given to a reader) is reported
instead: the other ranks would read it before rank 0 has written it. A file made when
missing (a cache) is checkpoint.py's: rank 0 makes it first.

Every rank runs the same code over the same files: a checkpoint saved by rank 0 (see
checkpoint.py) and then cleaned up by every rank (pyGAT keeps the best epoch's file and
removes the others: `for file in glob.glob('*.pkl'): os.remove(file)`) fails on every
rank but the first to remove it (FileNotFoundError, on whichever rank loses the race);
`os.replace(tmp, best)` on every rank likewise; `shutil.copyfile(last, best)` on every
rank writes the same file twice at once. One rank does it. No barrier is added: the
others may have listed the files before or after rank 0 changed them (a loop over
`glob()` may run another number of times on each rank), and a collective inside it would
pair with nothing.

Won't: guard an operation that shares its line with other statements (reported), one
on a temporary file of the process's own (`tempfile.mkstemp()`, `NamedTemporaryFile`),
or one inside a block already run by rank 0 only (a file written in a `with open(...)`).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, positional
from distrun.convert.build import guard_rank0, statements
from distrun.convert.context import Context, Transform
from distrun.convert.file_modes import opens_for_writing
from distrun.convert.idioms import assigns_inside, method_name
from distrun.convert.transforms.checkpoint import (
    every_rank_reaches,
    made_after_early_return,
    made_when_missing,
    writes_file,
)

CHANGES = frozenset({
    "os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree",
    "os.rename", "os.renames", "os.replace", "shutil.move",
    "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree",
    "os.symlink", "os.link",
})
_PATH_METHODS = frozenset({"unlink", "rmdir", "symlink_to", "hardlink_to"})  # pathlib.Path's
# Links made for the data to be read through: rank 0 makes them, then every rank waits
_LINKS = frozenset({"os.symlink", "os.link", "symlink_to", "hardlink_to"})
_TEMPORARY = "tempfile."


def plan_file_ops(ctx: Context) -> None:
    facts = ctx.facts
    for call in facts.calls:
        name = facts.call_name(call) or ""
        if name not in CHANGES and not (isinstance(call.func, cst.Attribute) and method_name(
                call) in _PATH_METHODS and not name.startswith(("os.", "shutil."))):
            continue
        if _own_temporary(ctx, call) or _in_rank0_block(ctx, call):
            continue
        _guard_alone(ctx, call)
        if (name if name in _LINKS else method_name(call)) in _LINKS:
            _wait_for_link(ctx, call)


def _wait_for_link(ctx: Context, call: cst.Call) -> None:
    """After a link made by rank 0 (the data read through it), a barrier where every rank
    comes, so that no rank reads through the link before it is there."""
    stmt = ctx.facts.statement(call)
    if stmt is None:
        return
    after = every_rank_reaches(ctx.facts, stmt)
    ctx.plan.insert_after(after, statements(ctx.target.barrier(ctx, at=call)))
    ctx.plan.change(call, "file_ops.link_barrier",
                    f"`{ctx.facts.code(call.func)}(...)`: the link rank 0 makes, then a barrier "
                    "(every rank waits for it before reading through it)")


def _guard_alone(ctx: Context, call: cst.Call, written: bool = False) -> None:
    """The line of `call` under `if RANK == 0:`, or reported where it is not alone."""
    facts, plan, rank = ctx.facts, ctx.plan, ctx.names.rank
    what = facts.code(call.func)
    parent = facts.parent.get(call)
    stmt = facts.statement(call)
    line = facts.parent.get(parent) if isinstance(parent, cst.Expr) else None
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
            and stmt is line):
        plan.finding(call, "file_ops.unguarded",
                     f"`{what}(...)` changes a file every rank shares, and it is not "
                     "alone on its line: every rank runs it (all but the first may fail, "
                     "or write the same file at once)",
                     f"put it on its own line under `if {rank} == 0:`")
        return
    plan.rewrite(line, lambda n: guard_rank0(n, rank))
    if written:
        plan.change(call, "file_ops.rank0_write",
                    f"`{what}(...)` writes a file every rank would write at once: "
                    "rank 0 writes it")
        return
    plan.change(call, "file_ops.rank0",
                f"`{what}(...)` on rank 0 only: every rank sees the same files (a "
                "checkpoint is saved by rank 0), so every rank but the first would fail "
                "on it (FileNotFoundError) or write the same file at once")


# Images written by a library (a sample grid each epoch), path first.
IMAGE_WRITERS = frozenset({
    "cv2.imwrite", "imageio.imwrite", "imageio.imsave", "imageio.v2.imwrite",
    "imageio.v3.imwrite", "matplotlib.pyplot.imsave", "skimage.io.imsave",
})


def _writes(ctx: Context, call: cst.Call) -> bool:
    return writes_file(ctx, call) or ctx.facts.call_name(call) in IMAGE_WRITERS \
        or _pil_save(ctx, call)


def _pil_save(ctx: Context, call: cst.Call) -> bool:
    """`im.save(path)` of a PIL image (`im = Image.fromarray(...)` in the same function,
    or `Image.open(...).save(path)`)."""
    facts = ctx.facts
    if method_name(call) != "save" or not isinstance(call.func, cst.Attribute) \
            or not positional(call):
        return False
    owner = call.func.value
    if isinstance(owner, cst.Call):
        return (facts.call_name(owner) or "").startswith("PIL.Image.")
    if not isinstance(owner, cst.Name):
        return False
    scope = facts.function(call)
    for assign in facts.assigns:
        if isinstance(assign, cst.Assign) and facts.function(assign) is scope and any(
                dotted(t.target) == owner.value for t in assign.targets) and isinstance(
                assign.value, cst.Call) and (facts.call_name(assign.value) or "").startswith(
                "PIL.Image."):
            return True
    return False


def _plan_result_writes(ctx: Context) -> None:
    """Files written by a library's call (`np.save(p, x)`, `df.to_csv(p)`, an image's
    `im.save(p)`): rank 0 only."""
    facts = ctx.facts
    readers = [c for c in facts.calls if not _writes(ctx, c)]
    for call in facts.calls:
        if facts.call_name(call) == "open" or not _writes(ctx, call) \
                or opens_for_writing(ctx, call) or _in_rank0_block(ctx, call):
            continue
        stmt = facts.statement(call)
        if stmt is None or made_when_missing(facts, stmt) or made_after_early_return(
                facts, stmt) is not None:
            continue  # a cache made when missing: checkpoint.py (rank 0 first)
        path = _path_of(call)
        if path is None:
            continue
        code = facts.code(path)
        back = next((r for r in readers if (r_path := _path_of(r)) is not None
                     and facts.code(r_path) == code and _same_place(facts, path, call, r)), None)
        if back is not None:
            ctx.plan.finding(call, "file_ops.read_back",
                             f"`{facts.code(call.func)}(...)` writes `{code}` on every rank, "
                             f"and line {facts.line(back)} reads it back: written by rank 0 "
                             "alone, the others could read it before it is there",
                             f"write it under `if {ctx.names.rank} == 0:`, then "
                             "`dist.barrier()` before it is read")
            continue
        _guard_alone(ctx, call, written=True)


def _same_place(facts: Facts, path: cst.BaseExpression, write: cst.Call, read: cst.Call
                ) -> bool:
    """Can `read`'s path, spelled as `write`'s, be the same file? A name is one in its own
    function (a parameter `file_path` of another module's reader is another file), an
    attribute or a global one in its module; a string is the same file anywhere."""
    if facts.module_of(read) is not facts.module_of(write):
        return not isinstance(path, (cst.Name, cst.Attribute))
    func = facts.function(write)
    if isinstance(path, cst.Name) and func is not None and (
            path.value in facts.params(func, False) or assigns_inside(facts, func, path.value)):
        return facts.function(read) is func  # a local name: this function's file only
    return True


def _path_of(call: cst.Call) -> cst.BaseExpression | None:
    """The file a call names: its first argument, or the path whose method it is
    (`Path(p).write_text(...)`, `p.read_text()`)."""
    if isinstance(call.func, cst.Attribute) and method_name(call) in (
            "write_text", "write_bytes", "read_text", "read_bytes"):
        return call.func.value
    args = positional(call)
    return args[0].value if args else None


def _own_temporary(ctx: Context, call: cst.Call) -> bool:
    """Is the path a temporary file this process made (`tempfile.mkstemp()`, ...), its own
    on each rank?"""
    args = positional(call)
    path = dotted(args[0].value) if args else None
    if isinstance(call.func, cst.Attribute) and not args:  # path.unlink()
        path = dotted(call.func.value)
    if path is None:
        return False
    facts = ctx.facts
    function = facts.function(call)
    for made in facts.calls:
        if not (facts.call_name(made) or "").startswith(_TEMPORARY) or \
                facts.function(made) is not function:
            continue
        item = next((a for a in facts.ancestors(made) if isinstance(a, cst.WithItem)), None)
        if item is not None and item.asname is not None and path.split(".")[0] == dotted(
                item.asname.name):
            return True  # with tempfile.NamedTemporaryFile() as f: ... f.name
        line = facts.statement(made)
        small = line.body[0] if isinstance(line, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign) and any(
                path.split(".")[0] == dotted(name) for target in small.targets
                for name in _names_in(target.target)):
            return True  # path = tempfile.mkstemp()[1], fd, path = tempfile.mkstemp()
    return False


def _names_in(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _names_in(e.value)]
    return [target]


def _in_rank0_block(ctx: Context, call: cst.Call) -> bool:
    """Inside a `with open(path, "w")` block, which the output transform runs on rank 0."""
    return any(isinstance(node, cst.With) and any(
        isinstance(item.item, cst.Call) and opens_for_writing(ctx, item.item)
        for item in node.items) for node in ctx.facts.ancestors(call))


def _plan_all(ctx: Context) -> None:
    plan_file_ops(ctx)
    _plan_result_writes(ctx)


TRANSFORM = Transform("file_ops", _plan_all)
