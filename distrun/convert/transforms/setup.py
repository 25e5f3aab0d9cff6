"""Process group: the setup block, the imports it needs, and the teardown.

Inserts, after the imports (or at the top of `if __name__ == "__main__":` when
everything that needs it runs from there, so DataLoader workers that re-import
the script never join a process group):

    LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))   # set by torchrun
    ...
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", ...)

Run without a launcher, the script still works as a world of one. Appends
`dist.destroy_process_group()` at the end of the main guard or of the module
(a final `sys.exit(main())` goes into `try:` with the teardown in `finally:`).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, walk
from distrun.convert.build import statements
from distrun.convert.context import Context, Transform
from distrun.convert.edits import Plan
from distrun.convert.imports import after_first_imports, import_lines, imported_by


def setup_code(ctx: Context) -> str:
    n = ctx.names
    if ctx.accelerate:
        amp = ctx.options.amp
        mixed = {"fp16": '"fp16" if torch.cuda.is_available() else "no"',
                 "bf16": '"bf16"', "none": '"no"'}.get(amp)
        # cpu=True without CUDA: otherwise accelerate sees no distributed run on CPU.
        # No mixed_precision under --amp keep: `accelerate launch --mixed_precision`
        # (ACCELERATE_MIXED_PRECISION) decides, as in a script written for accelerate.
        chosen = f" mixed_precision={mixed}," if mixed else ""
        return f'''{n.accelerator} = Accelerator(
    cpu=not torch.cuda.is_available(),{chosen}
)
{n.local_rank} = {n.accelerator}.local_process_index
{n.rank} = {n.accelerator}.process_index
{n.world_size} = {n.accelerator}.num_processes
{n.device} = {n.accelerator}.device
'''
    return rank_names_code(ctx) + group_code(ctx)


def rank_names_code(ctx: Context) -> str:
    """This process's place and device, read from the launcher's variables: cheap, so
    they can live at module level (importing the script then starts nothing)."""
    n = ctx.names
    return f'''{n.local_rank} = int({n.os}.environ.get("LOCAL_RANK", 0))
{n.rank} = int({n.os}.environ.get("RANK", 0))
{n.world_size} = int({n.os}.environ.get("WORLD_SIZE", 1))
{n.device} = torch.device("cuda", {n.local_rank}) if torch.cuda.is_available() else \
torch.device("cpu")
'''  # (the backslash joins the two lines)


def group_code(ctx: Context) -> str:
    """The process group (and this process's GPU): under the main guard when it can be."""
    n = ctx.names
    return f'''if torch.cuda.is_available():
    torch.cuda.set_device({n.local_rank})
if "RANK" in {n.os}.environ:
    {n.dist}.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
else:  # started without a launcher: a world of one process
    {n.dist}.init_process_group(
        "nccl" if torch.cuda.is_available() else "gloo",
        store={n.dist}.HashStore(), rank=0, world_size=1,
    )
'''


def plan_setup(ctx: Context) -> None:
    facts, plan, names = ctx.facts, ctx.plan, ctx.names
    if runs_nothing(facts.entry.module):
        ctx.entry_is_library = True
        plan.finding(None, "setup", "this file only defines functions and classes: it runs no "
                     "training itself, so it gets no process group (it would start one when "
                     "imported); its code is converted as a module of a project",
                     "convert the script that imports and runs it (`distrun convert train.py`): "
                     "this module is converted with it, and the process group set up there")
        return
    ctx.need("gc", "torch", "dist", "accelerator" if ctx.accelerate else "os")
    entry = facts.entry
    guard = entry.main_guard
    in_guard = guard is not None and all(
        t is guard or isinstance(t, (cst.FunctionDef, cst.ClassDef)) or _is_import(t)
        for t in plan.touched_top_level if facts.module_of(t) is entry
    )
    setup = statements(setup_code(ctx) + "".join(ctx.setup_lines))
    helpers = ctx.helper_lines(entry)
    comment = cst.EmptyLine(comment=cst.Comment(
        "# distrun: one process per device; accelerate knows which one this is."
        if ctx.accelerate else
        "# distrun: one process per device; torchrun sets LOCAL_RANK, RANK and WORLD_SIZE."))
    # Collect garbage first: DDP's last gradient all-reduces can sit in reference cycles;
    # freed after the group is gone, gloo aborts the process ("terminate called without an
    # active exception", seen on loaded machines).
    teardown = (f"{names.gc}.collect()  # free DDP's finished communication first\n"
                f"{names.dist}.destroy_process_group()\n")
    if ctx.accelerate:  # accelerate starts no process group for a single process
        teardown = (f"{names.gc}.collect()  # free DDP's finished communication first\n"
                    f"if {names.dist}.is_initialized():\n"
                    f"    {names.dist}.destroy_process_group()\n")
    # The first block of imports: a script importing more later (a notebook's cells) may
    # use the new names before that.
    top = list(entry.module.body)
    at = after_first_imports(entry.module)
    last_import = top[at - 1] if at and _is_import(top[at - 1]) else None
    imports = import_lines(imported_by(top[:at]), names, ctx.imports_for(entry))
    imports += spaced(statements(helpers)) if helpers else []  # module level, also by a guard
    if in_guard and not ctx.accelerate:  # the names at module level: `from train import f`
        setup = statements(group_code(ctx) + "".join(ctx.setup_lines))
        module_names = statements(rank_names_code(ctx))
        module_names[0] = module_names[0].with_changes(leading_lines=[
            cst.EmptyLine(indent=False), comment])
        imports += module_names
        comment = cst.EmptyLine(comment=cst.Comment(
            "# distrun: the process group, for a run (importing this file starts none)"))
    if last_import is not None:
        plan.insert_after(last_import, imports)
    elif imports:
        plan.insert_before(first_code_statement(entry.module), imports)
    if in_guard and guard is not None and isinstance(guard.body, cst.IndentedBlock):
        body = list(guard.body.body)
        setup[0] = setup[0].with_changes(leading_lines=[comment])
        plan.insert_before(body[0], setup)
        _append_teardown(facts, plan, body, teardown)
        where = "at the top of the main guard"
    else:
        body = list(entry.module.body)
        setup[0] = setup[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), comment])
        if last_import is not None:
            plan.insert_after(last_import, setup)
        else:
            plan.insert_before(first_code_statement(entry.module), setup)
        _append_teardown(facts, plan, body, teardown)
        where = "after the imports"
    anchor = guard if in_guard and guard is not None else (last_import or entry.module.body[0])
    plan.change(anchor, "setup", f"`Accelerator()` created {where}: it sets up the processes "
                "and the device" if ctx.accelerate else f"process group set up {where}: nccl "
                "with the local rank's GPU when CUDA is available, gloo on CPU otherwise")
    plan.change(body[-1], "setup", "`destroy_process_group()` when the script ends")


TRANSFORM = Transform("setup", plan_setup)


def runs_nothing(module: cst.Module) -> bool:
    """Does the module only define (imports, functions, classes, constants, a docstring),
    with no main guard and no call at its top level?"""
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or _is_import(stmt):
            continue
        if not isinstance(stmt, cst.SimpleStatementLine):
            return False  # an if, a loop, a with: code that runs
        for small in stmt.body:
            value = small.value if isinstance(small, (cst.Assign, cst.AnnAssign, cst.Expr)) \
                else None
            if not isinstance(small, (cst.Assign, cst.AnnAssign, cst.Expr)) or value is None \
                    or any(isinstance(n, cst.Call) for n in walk(value)):
                return False
    return True


def _is_import(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body
    )


def spaced(defs: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Top-level definitions with the two blank lines above each that PEP 8 wants."""
    blank = [cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
    definition = (cst.FunctionDef, cst.ClassDef)
    return [d.with_changes(leading_lines=blank) if isinstance(d, definition) else d
            for d in defs]


def first_code_statement(module: cst.Module) -> cst.BaseStatement:
    """The module's first statement after its docstring."""
    body = module.body
    for stmt in body:
        is_docstring = (
            isinstance(stmt, cst.SimpleStatementLine)
            and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        )
        if not is_docstring:
            return stmt
    return body[-1]


def _append_teardown(facts: Facts, plan: Plan, body: list[cst.BaseStatement], code: str) -> None:
    last = body[-1]
    if _exit_call(facts, last) is None:
        plan.insert_after(last, statements(code))
        return
    teardown = statements(code)

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        return cst.Try(
            body=cst.IndentedBlock([node.with_changes(leading_lines=())]),
            finalbody=cst.Finally(body=cst.IndentedBlock(teardown)),
            leading_lines=node.leading_lines,
        )

    plan.rewrite(last, wrap)


def _exit_call(facts: Facts, stmt: cst.BaseStatement) -> cst.Call | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    value: cst.BaseExpression | None = None
    if isinstance(small, cst.Expr):
        value = small.value
    elif isinstance(small, cst.Raise):
        value = small.exc
    if isinstance(value, cst.Call) and facts.call_name(value) in (
        "sys.exit", "exit", "quit", "SystemExit", "os._exit",
    ):
        return value
    return None
