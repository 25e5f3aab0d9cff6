"""Names that must be the same on every rank: a run's folder from the clock or a random id.

    run_id = datetime.now().strftime("%m%d_%H%M%S")
        ->  run_id = rank0_value(datetime.now().strftime("%m%d_%H%M%S"))

Processes start a moment apart: each would read its own clock (or draw its own id) and
write into its own folder (or fail making the same one). `rank0_value` sends rank 0's
value to every rank (`dist.broadcast_object_list`); it is defined with the setup.

Only a name that says it names a run, a folder or a path (`run_id`, `timestamp`,
`log_dir`, `save_path`...), or, in a function, a clock made a string whatever its name
(`start_time = datetime.now().strftime(...)`: a folder's name, not a timer), set outside
any loop: every rank must reach the statement (it is a collective), and a timer read in
a loop is per rank by design.

A clock read at the top of an imported module (a settings file's
`TIME_NOW = datetime.now()...`) is taken at import, before any process group: the entry
re-takes it after its set-up, by the name it reads it by:

    from conf import settings   ...   settings.TIME_NOW = rank0_value(settings.TIME_NOW)
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, ModuleInfo, dotted
from distrun.convert.build import Rewrite, code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.imports import after_first_imports, imported_by
from distrun.convert.names import Names

CLOCKS = frozenset({
    "datetime.datetime.now", "datetime.datetime.today", "datetime.datetime.utcnow",
    "datetime.date.today", "time.time", "time.strftime", "time.localtime", "time.asctime",
    "time.ctime", "time.time_ns", "uuid.uuid1", "uuid.uuid4", "secrets.token_hex",
    "secrets.token_urlsafe",
})
_NAMES = re.compile(r"(run|exp|experiment|version|stamp|tag|dir|folder|path|name|id)s?$",
                    re.IGNORECASE)


def plan_agree(ctx: Context) -> None:
    facts, helper = ctx.facts, ctx.names.rank0_value
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        target = dotted(assign.targets[0].target)
        clock = next((c for c in facts.calls_in(assign.value)
                      if facts.call_name(c) in CLOCKS), None)
        if target is None or clock is None or not (
                _NAMES.search(target.rsplit(".", 1)[-1])
                or facts.function(assign) is not None and _formatted(facts, assign.value)):
            continue
        if next(iter(facts.enclosing_loops(assign)), None) is not None:
            continue
        ctx.plan.rewrite(assign.value, lambda n: expression(f"{helper}({code_of(n)})"))
        ctx.need("dist", at=assign)
        ctx.define_helper("rank0_value", assign, helper_code(ctx.names))
        ctx.plan.change(assign, "rank0_values.broadcast",
                        f"`{target}` comes from `{facts.code(clock.func)}()`: "
                        f"rank 0's value is sent to every rank (`{helper}`), so all of them "
                        "use the same one")


    _plan_imported_clocks(ctx)


def _formatted(facts: Facts, value: cst.BaseExpression) -> bool:
    """A clock made a string (`datetime.now().strftime(...)`, `time.strftime(...)`, an
    f-string): a name (a run folder's), whatever the variable is called (`start_time`),
    not a timer."""
    if isinstance(value, cst.FormattedString):
        return True
    return isinstance(value, cst.Call) and (
        isinstance(value.func, cst.Attribute) and value.func.attr.value == "strftime"
        or facts.call_name(value) in ("time.strftime", "str"))


def _plan_imported_clocks(ctx: Context) -> None:
    """Clock constants of imported modules, read by the entry: agreed after the set-up."""
    facts, entry = ctx.facts, ctx.facts.entry
    constants: dict[str, tuple[ModuleInfo, cst.Assign, cst.Call]] = {}
    for assign in facts.assigns:
        info = facts.module_of(assign)
        if info is entry or not isinstance(assign, cst.Assign) or len(assign.targets) != 1 \
                or not isinstance(assign.targets[0].target, cst.Name) \
                or facts.function(assign) is not None or facts.enclosing_class(assign) \
                or next(iter(facts.enclosing_loops(assign)), None) is not None:
            continue
        clock = next((c for c in facts.calls_in(assign.value)
                      if facts.call_name(c) in CLOCKS), None)
        if clock is not None:
            constants[assign.targets[0].target.value] = (info, assign, clock)
    if not constants or ctx.entry_is_library:
        return
    imported = imported_by(entry.module.body[:after_first_imports(entry.module)])
    reads: dict[str, str] = {}  # the entry's way to the constant -> the constant's name
    for local, qualified in imported.items():
        module, _, name = qualified.rpartition(".")
        if name in constants and constants[name][0].name == module:
            reads.setdefault(local, name)
    for attribute in facts.attributes:
        base = attribute.value
        if facts.module_of(attribute) is entry and isinstance(base, cst.Name) \
                and base.value in imported and attribute.attr.value in constants:
            reads.setdefault(f"{base.value}.{attribute.attr.value}", attribute.attr.value)
    helper = ctx.names.rank0_value
    for read, name in reads.items():
        info, assign, clock = constants[name]
        ctx.setup_lines.append(f"{read} = {helper}({read})  # rank 0's clock on every rank\n")
        ctx.need("dist", at=entry.module)
        ctx.define_helper("rank0_value", entry.module, helper_code(ctx.names))
        ctx.plan.change(assign, "rank0_values.imported",
                        f"`{name}` comes from `{facts.code(clock.func)}()` when {info.path} "
                        "is imported, in each process: ranks started a moment apart would "
                        f"name different folders; after the set-up, `{read} = {helper}"
                        f"({read})` in {entry.path} gives every rank rank 0's value")


TRANSFORM = Transform("agree", plan_agree)


def helper_code(n: Names) -> str:
    """The definition of the helper, for the modules that use it."""
    return f'''

def {n.rank0_value}(value):
    """distrun: rank 0's value on every rank (a clock reading, a random id)."""
    if not {n.dist}.is_initialized():
        return value
    holder = [value]
    {n.dist}.broadcast_object_list(holder, src=0)
    return holder[0]
'''


def through_rank0(helper: str) -> Rewrite:
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args = ", ".join([code_of(node.func), *(
            f"{a.keyword.value}={code_of(a.value)}" if a.keyword is not None
            else code_of(a.value) for a in node.args)])
        return expression(f"{helper}({args})")

    return rewrite


def rank0_call_code(n: Names) -> str:
    return f'''

def {n.rank0_call}(fn, *args, **kwargs):
    """distrun: `fn(*args, **kwargs)` run on rank 0 only (it writes files every rank
    would write at once); the other ranks wait for its result, sent to them."""
    if not {n.dist}.is_initialized():
        return fn(*args, **kwargs)
    holder = [fn(*args, **kwargs) if {n.dist}.get_rank() == 0 else None]
    {n.dist}.broadcast_object_list(holder, src=0)
    return holder[0]
'''
