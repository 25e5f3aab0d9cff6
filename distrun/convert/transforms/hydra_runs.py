"""Hydra's run folder, written by rank 0 only (part of the output transform).

A script whose entry is `@hydra.main(...)` gets, in every process, a run folder Hydra
makes before calling it (`outputs/<date>/<time>` by default): the composed configuration
in `.hydra/` (config.yaml, hydra.yaml, overrides.yaml) and the job's log file. Each rank
would write them at once (the same files when the ranks start in the same second, an
extra folder when not). On the other ranks Hydra is told, before it reads the command
line, to write neither (its own overrides, as a user would pass them):

    if RANK != 0:  # Hydra's files in its run folder: rank 0's
        sys.argv += ["hydra.output_subdir=null", "hydra/job_logging=disabled"]

Their logging then goes nowhere (the script's logging calls are rank 0's already). Not
done: a run folder another rank reads back (with `hydra.job.chdir`, each rank works in
the folder of its own start time).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.context import Context

_HYDRA_MAIN = frozenset({"hydra.main"})
OVERRIDES = '["hydra.output_subdir=null", "hydra/job_logging=disabled"]'


def rank0_run_folder(ctx: Context) -> None:
    facts = ctx.facts
    for func in facts.entry.functions.values():
        decorated = next((d for d in func.decorators if facts.qualname(
            d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
            in _HYDRA_MAIN), None)
        if decorated is None:
            continue
        ctx.need("sys", at=facts.entry.module)
        ctx.setup_lines.append(
            f"if {ctx.names.rank} != 0:  # Hydra's files in its run folder: rank 0's\n"
            f"    sys.argv += {OVERRIDES}\n")
        ctx.plan.change(decorated, "output.hydra_run_folder",
                        "`@hydra.main`: on the other ranks Hydra writes no `.hydra/` "
                        "configuration and no job log in its run folder "
                        f"(`sys.argv += {OVERRIDES}` before it reads the command line): "
                        "rank 0 writes them, once")
        return
