"""Names that must be the same on every rank: a run's folder from the clock or a random id.

    run_id = datetime.now().strftime("%m%d_%H%M%S")
        ->  run_id = rank0_value(datetime.now().strftime("%m%d_%H%M%S"))

Processes start a moment apart: each would read its own clock (or draw its own id) and
write into its own folder (or fail making the same one). `rank0_value` sends rank 0's
value to every rank (`dist.broadcast_object_list`); it is defined with the setup.

Only a name that says it names a run, a folder or a path (`run_id`, `timestamp`,
`log_dir`, `save_path`...), set outside any loop: every rank must reach the statement
(it is a collective), and a timer read in a loop is per rank by design.
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, Transform
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
        if target is None or clock is None or not _NAMES.search(target.rsplit(".", 1)[-1]):
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
