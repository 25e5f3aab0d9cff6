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


def plan_setup(ctx: Context) -> None:
    facts, plan, names = ctx.facts, ctx.plan, ctx.names
    if runs_nothing(facts.entry.module):
        ctx.entry_is_library = True
        plan.finding(None, "setup.library_module",
                     "this file only defines functions and classes: it runs no "
                     "training itself, so it gets no process group (it would start one when "
                     "imported); its code is converted as a module of a project",
                     "convert the script that imports and runs it (`distrun convert train.py`): "
                     "this module is converted with it, and the process group set up there")
        return
    setup = ctx.target.setup(ctx)
    ctx.need(*setup.imports)
    entry = facts.entry
    guard = entry.main_guard
    in_guard = guard is not None and all(
        t is guard or isinstance(t, (cst.FunctionDef, cst.ClassDef)) or _is_import(t)
        for t in plan.touched_top_level if facts.module_of(t) is entry
    )
    extra = "".join(ctx.setup_lines)
    code = statements(setup.module_level + setup.start + extra)
    helpers = ctx.helper_lines(entry)
    comment = cst.EmptyLine(comment=cst.Comment(setup.comment))
    # The first block of imports: a script importing more later (a notebook's cells) may
    # use the new names before that.
    top = list(entry.module.body)
    at = after_first_imports(entry.module)
    last_import = top[at - 1] if at and _is_import(top[at - 1]) else None
    imports = import_lines(imported_by(top[:at]), names, ctx.imports_for(entry))
    imports += spaced(statements(helpers)) if helpers else []  # module level, also by a guard
    if in_guard and setup.module_level:  # the names at module level: `from train import f`
        code = statements(setup.start + extra)
        module_names = statements(setup.module_level)
        module_names[0] = module_names[0].with_changes(leading_lines=[
            cst.EmptyLine(indent=False), comment])
        imports += module_names
        comment = cst.EmptyLine(comment=cst.Comment(setup.start_comment))
    if last_import is not None:
        plan.insert_after(last_import, imports)
    elif imports:
        plan.insert_before(first_code_statement(entry.module), imports)
    if in_guard and guard is not None and isinstance(guard.body, cst.IndentedBlock):
        body = list(guard.body.body)
        code[0] = code[0].with_changes(leading_lines=[comment])
        plan.insert_before(body[0], code)
        _append_teardown(facts, plan, body, setup.teardown)
        where = "at the top of the main guard"
    else:
        body = list(entry.module.body)
        code[0] = code[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), comment])
        if last_import is not None:
            plan.insert_after(last_import, code)
        else:
            plan.insert_before(first_code_statement(entry.module), code)
        _append_teardown(facts, plan, body, setup.teardown)
        where = "after the imports"
    anchor = guard if in_guard and guard is not None else (last_import or entry.module.body[0])
    plan.change(anchor, "setup.process_group", setup.message.format(where=where))
    plan.change(body[-1], "setup.teardown", "`destroy_process_group()` when the script ends")


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
