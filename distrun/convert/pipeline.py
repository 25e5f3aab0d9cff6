"""The conversion pipeline: one parse, the gates, the transforms in order, one rewrite.

Gates come first: a script that is already distributed, or starts its own processes,
or does not train, is returned unchanged with the reason. Otherwise every transform of
`transforms.PIPELINE` whose condition holds for the options records its edits on one
shared context, and the plan is applied in a single pass.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts
from distrun.convert.apply import apply
from distrun.convert.context import Context
from distrun.convert.edits import Plan
from distrun.convert.idioms import DATALOADER, is_backward, is_optimizer
from distrun.convert.names import Names
from distrun.convert.options import ConvertOptions
from distrun.convert.report import ConvertResult, Finding
from distrun.convert.transforms import PIPELINE
from distrun.convert.transforms.detect import already_distributed, spawns_processes


def run(source: str, module: cst.Module, options: ConvertOptions) -> ConvertResult:
    facts = Facts.build(module)
    stopped = _gate(source, facts)
    if stopped is not None:
        return stopped
    ctx = Context(facts, Plan(facts), Names.avoiding(facts.bound_names, facts.imports), options)
    for transform in PIPELINE:
        if transform.applies(options):
            transform.run(ctx)
    output = apply(ctx.plan).code
    return ConvertResult(source, output, "converted", ctx.plan.changes, ctx.plan.findings)


def _gate(source: str, facts: Facts) -> ConvertResult | None:
    """The result for a script that must not be converted, or None."""
    found = already_distributed(facts)
    if found is not None:
        return ConvertResult(source, source, "already-distributed", findings=[Finding(
            facts.line(found), "detect", "info",
            f"already distributed (`{facts.code(found.func)}`): left unchanged")])
    found = spawns_processes(facts)
    if found is not None:
        return ConvertResult(source, source, "unsupported", findings=[Finding(
            facts.line(found), "detect", "warning",
            f"the script starts its own processes (`{facts.code(found.func)}`): not converted",
            "let torchrun start the processes: call the worker function directly once per "
            "process and convert that script")])
    if not _looks_like_training(facts):
        return ConvertResult(source, source, "nothing-to-do", findings=[Finding(
            1, "detect", "info", "no PyTorch training found (no optimizer, DataLoader or "
            "backward() on a torch import): nothing to convert")])
    return None


def _looks_like_training(facts: Facts) -> bool:
    """Torch is imported and something trains: an optimizer, a DataLoader or a backward()."""
    uses_torch = any(q == "torch" or q.startswith("torch.") for q in facts.imports.values())
    return uses_torch and any(
        is_backward(call) or is_optimizer(facts, call) or facts.call_name(call) in DATALOADER
        for call in facts.calls)
