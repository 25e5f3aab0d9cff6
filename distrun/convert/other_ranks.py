"""What the ranks but 0 hold where rank 0 holds an output object (part of the output
transform, whose rules these are).

A TensorBoard SummaryWriter, or a tracker's run (mlflow, comet, neptune, aim, visdom, Azure ML),
made on every rank writes its files (or sends its data) once per rank. It is made on
rank 0 only, and the other ranks get a stand-in, `Rank0Only` (defined with the set-up),
that answers every use of the object without doing anything:

    writer = SummaryWriter(args.logs)
        ->  writer = SummaryWriter(args.logs) if RANK == 0 else Rank0Only()
    with SummaryWriter(d) as w:
        ->  with (SummaryWriter(d) if RANK == 0 else Rank0Only()) as w:

Its methods do nothing (and give the stand-in back), its attributes are stand-ins, it
is true (`if writer:` takes rank 0's branch) and a context manager, and it goes wherever
the writer goes: a function of another module, a library, `self.writer` read by another
class. A stand-in, not a guard at each use: uses reach where no guard can (an attribute
read inside an expression, a library the writer is handed to), and `None` fails at the
first use the analysis missed, on rank 1 only.

Where the script reads the writer's folder (`writer.log_dir`, `writer.logdir`,
`writer.get_logdir()`: a checkpoint path, a log file beside the events), every rank reads
rank 0's, which by default the clock and the host name make:

    self.writer = SummaryWriter(comment="_x")
        ->  self.writer = Rank0Only.shared(SummaryWriter(comment="_x") if RANK == 0 else None)

`shared` sends rank 0's folder to the others once rank 0 has made it (a collective:
only where every rank makes the writer, neither under an `if`, nor in a conditional
expression, nor when another module is imported). Elsewhere the folder the script gives
the writer (`SummaryWriter(args.logs)`) is given to the stand-in (`Rank0Only(args.logs)`),
and a folder the writer picks itself is reported where it is read.

A log file every rank opens (`logging.FileHandler(path)`) is opened by the ranks but 0
only if they log to it (an error: `delay=RANK != 0`), and with `mode="w"` each would
truncate what rank 0 wrote before it opened the file: rank 0 truncates it, the others
append (`mode="w" if RANK == 0 else "a"`; also `logging.basicConfig(filemode="w")` where
it stays on every rank).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional, string_value
from distrun.convert.build import append_keyword, code_of, expression
from distrun.convert.context import Context
from distrun.convert.names import Names
from distrun.convert.transforms.rank0_values import CLOCKS

WRITERS = frozenset({"torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter",
                     "torch.utils.tensorboard.writer.SummaryWriter"})
TRACKERS = frozenset({"mlflow.start_run", "comet_ml.Experiment", "neptune.init_run",
                      "aim.Run", "visdom.Visdom", "azureml.core.run.Run.get_context",
                      "azureml.core.Run.get_context"})
OBJECTS = WRITERS | TRACKERS
FOLDER_READS = frozenset({"log_dir", "logdir", "get_logdir"})
FILE_HANDLERS = frozenset({"logging.FileHandler", "logging.handlers.WatchedFileHandler",
                           "logging.handlers.RotatingFileHandler"})
_CONDITIONAL = (cst.IfExp, cst.BooleanOperation, cst.Lambda, cst.ListComp, cst.SetComp,
                cst.DictComp, cst.GeneratorExp)
_BARE_PARENTS = (cst.Assign, cst.AnnAssign)

Guard = Callable[[Context, cst.Call, str], None]


def plan_object(ctx: Context, call: cst.Call, name: str, guard: Guard) -> None:
    """`call` makes an output object (`name`: what it calls): rank 0 makes it, the
    others hold a stand-in; a call that is a statement of its own is guarded."""
    facts, n = ctx.facts, ctx.names
    stmt = facts.statement(call)
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 \
            and isinstance(stmt.body[0], cst.Expr):
        guard(ctx, call, "tracking")  # `SummaryWriter(d).add_text(...)`: nothing holds it
        return
    short = facts.code(call.func)
    reads = folder_reads(ctx, call) if name in WRITERS else []
    defined = ctx.helpers.get(facts.module_of(call).name, {}).get("rank0_only", "")
    full = bool(reads) or "shared" in defined  # the folder's parts, where a folder is read
    ctx.define_helper("rank0_only", call, helper_code(n, full))
    if full:
        ctx.need("dist", at=call)
    sent = bool(reads) and _every_rank_makes(ctx, call)
    given = _folder_given(facts, call) if reads and not sent else None
    bare = isinstance(facts.parent.get(call), _BARE_PARENTS)
    if sent:
        ctx.plan.rewrite(call, lambda node: expression(
            f"{n.rank0_only}.shared({code_of(node)} if {n.rank} == 0 else None)"))
    else:
        stand_in = f"{n.rank0_only}({given or ''})"
        ctx.plan.rewrite(call, lambda node: expression(
            f"{code_of(node)} if {n.rank} == 0 else {stand_in}" if bare
            else f"({code_of(node)} if {n.rank} == 0 else {stand_in})"))
    ctx.plan.change(call, "output.rank0_object",
                    f"`{short}(...)` runs on rank 0 only; the other ranks hold a stand-in "
                    f"(`{n.rank0_only}`) that answers every use of it: its methods do "
                    "nothing, its attributes are stand-ins, and it tests true as rank 0's "
                    "does")
    if not reads:
        return
    read = f"`{facts.code(reads[0])}` (line {facts.line(reads[0])})"
    if sent:
        ctx.plan.change(call, "output.rank0_folder",
                        f"its folder is read, {read}: rank 0 sends it to every rank once "
                        f"it is made (`{n.rank0_only}.shared`), so every rank uses rank "
                        "0's folder, and finds it there")
    elif given is not None:
        ctx.plan.change(call, "output.rank0_folder",
                        f"its folder is read, {read}: the stand-in holds the folder the "
                        f"script gives the writer (`{given}`), rank 0's")
    else:
        ctx.plan.finding(reads[0], "output.rank0_folder",
                         f"`{facts.code(reads[0])}` reads the folder of a `{short}(...)` "
                         "made on rank 0 only, "
                         "which names it itself, where not every rank passes: on the other "
                         "ranks it is a stand-in, not a path",
                         "make the writer where every rank passes, or give it a folder "
                         "computed before (`log_dir = ...`, `SummaryWriter(log_dir)`) and "
                         "read that name")


def folder_reads(ctx: Context, call: cst.Call) -> list[cst.Attribute]:
    """Reads of the folder (`.log_dir`, `.logdir`, `.get_logdir`) of the writer `call`
    makes, wherever the writer goes (`self.writer`, a parameter) or a name it is given."""
    facts, flow = ctx.facts, ctx.flow
    targets = bound_to(facts, call)
    roots = {flow.root(p) for t in targets if (p := flow.place_of(t)) is not None}
    names = {code.rsplit(".", 1)[-1] for t in targets if (code := dotted(t))}
    found = []
    for attr in facts.attributes:
        if attr.attr.value not in FOLDER_READS or isinstance(facts.parent.get(attr),
                                                              cst.AssignTarget):
            continue
        place = flow.place_of(attr.value)
        owner = dotted(attr.value) or ""
        if (place is not None and flow.root(place) in roots) \
                or owner.rsplit(".", 1)[-1] in names:
            found.append(attr)
    return found


def bound_to(facts: Facts, call: cst.Call) -> list[cst.BaseExpression]:
    """What holds the object `call` makes: the assignment's targets, the `as` name."""
    parent = facts.parent.get(call)
    if isinstance(parent, cst.Assign):
        return [t.target for t in parent.targets]
    if isinstance(parent, cst.AnnAssign):
        return [parent.target]
    if isinstance(parent, cst.WithItem) and parent.asname is not None \
            and isinstance(parent.asname.name, (cst.Name, cst.Attribute)):
        return [parent.asname.name]
    return []


def _every_rank_makes(ctx: Context, call: cst.Call) -> bool:
    """Does every rank run `call`, once the process group is up (the point where rank 0
    can send the folder)? Not under an `if` (ranks may take other branches), a
    conditional expression, a lambda or a comprehension; not at the top of a class or of
    a module other than the entry (it runs when imported, before the set-up)."""
    facts = ctx.facts
    guard = facts.module_of(call).main_guard
    for node in facts.ancestors(call):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(node, _CONDITIONAL) or (isinstance(node, cst.If) and node is not guard):
            return False
    if facts.function(call) is None:
        return facts.module_of(call) is facts.entry and facts.enclosing_class(call) is None
    return True


def _folder_given(facts: Facts, call: cst.Call) -> str | None:
    """The folder the script gives the writer (`log_dir=`/`logdir=` or the first
    argument), as code, if it does not read the clock (each rank would read its own)."""
    arg = keyword(call, "log_dir") or keyword(call, "logdir")
    if arg is None:
        args = positional(call)
        arg = args[0] if args else None
    if arg is None:
        return None
    if any(facts.call_name(c) in CLOCKS for c in facts.calls_in(arg.value)):
        return None
    return code_of(arg.value)


def plan_log_file(ctx: Context, call: cst.Call, name: str) -> None:
    """A log file every rank opens: the others open it only when they write to it (an
    error), after rank 0, and append to it (`mode="w"` would truncate rank 0's lines)."""
    rank = ctx.names.rank
    is_config = name == "logging.basicConfig"
    mode_name = "filemode" if is_config else "mode"
    arg = keyword(call, mode_name)
    if arg is None and not is_config:
        args = positional(call)
        arg = args[1] if len(args) > 1 else None
    mode = string_value(arg.value) if arg is not None else None
    truncates = arg is not None and mode is not None and "w" in mode
    if truncates:
        assert arg is not None and mode is not None
        appends = mode.replace("w", "a")
        ctx.plan.rewrite(arg.value, lambda node: expression(
            f'{code_of(node)} if {rank} == 0 else "{appends}"'))
    if not is_config:
        delay = keyword(call, "delay")
        if delay is not None:
            ctx.plan.rewrite(delay.value, lambda node: expression(
                f"{_atom(node)} or {rank} != 0"))
        else:
            ctx.plan.rewrite(call, lambda node: append_keyword(
                _call(node), "delay", expression(f"{rank} != 0")))
    elif not truncates:
        return
    what = "the ranks but 0 open it only if they log to it (an error: `delay`)" \
        if not is_config else "it stays on every rank (before the main guard)"
    how = (f"; with `{mode_name}={mode!r}`, rank 0 truncates it and the others append "
           "(they would truncate what rank 0 wrote before)") if truncates else ""
    ctx.plan.change(call, "output.log_file", f"log file opened by every rank: {what}{how}")


def _atom(node: cst.CSTNode) -> str:
    """`node` as code that binds tighter than `or`."""
    simple = isinstance(node, (cst.Name, cst.Attribute, cst.BaseNumber, cst.BaseString,
                               cst.Call))
    return code_of(node) if simple else f"({code_of(node)})"


def _call(node: cst.CSTNode) -> cst.Call:
    assert isinstance(node, cst.Call)
    return node


def helper_code(n: Names, folder: bool) -> str:
    """The definition of the stand-in, for the modules that make rank 0's objects; with
    `folder`, what answers the reads of a writer's folder."""
    if not folder:
        return f'''

class {n.rank0_only}:
    """distrun: stands in, on every rank but 0, for an object made on rank 0 only (a
    SummaryWriter): its methods do nothing and its attributes are stand-ins too."""
{_ANSWERS}'''
    return f'''

class {n.rank0_only}:
    """distrun: stands in, on every rank but 0, for an object made on rank 0 only (a
    SummaryWriter): its methods do nothing, its attributes are stand-ins too, and the
    folder it writes to is rank 0's where it is known (`log_dir`, `get_logdir()`)."""

    def __init__(self, folder=None):
        if folder is not None:
            self.log_dir = self.logdir = folder

    @classmethod
    def shared(cls, made):
        """`made` on rank 0; on the others, a stand-in with its folder, which rank 0
        sends once it has made it (every rank calls this)."""
        holder = [getattr(made, "log_dir", getattr(made, "logdir", None))]
        if {n.dist}.is_initialized():
            {n.dist}.broadcast_object_list(holder, src=0)
        return made if {n.rank} == 0 else cls(holder[0])

    def get_logdir(self):
        return self.__dict__.get("log_dir", self)
{_ANSWERS}'''


_ANSWERS = '''
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
'''
