"""The conversion pipeline: one parse, the transforms in order, one rewrite.

Order matters: the model transform runs before checkpoints (which need to know
which names denote the wrapped model) and setup runs last (it places the setup
block where everything else that needs it can see it).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts
from distrun.convert.options import ConvertOptions
from distrun.convert.plan import Names, Plan
from distrun.convert.report import ConvertResult, Finding
from distrun.convert.transforms.accumulate import plan_no_sync
from distrun.convert.transforms.amp import plan_amp
from distrun.convert.transforms.checkpoint import plan_checkpoints
from distrun.convert.transforms.data import (
    DATALOADER,
    plan_data,
    prepare_remaining_loaders,
    shard_eval_loaders,
)
from distrun.convert.transforms.detect import already_distributed, spawns_processes
from distrun.convert.transforms.device import plan_devices
from distrun.convert.transforms.hazards import plan_hazards
from distrun.convert.transforms.model import is_optimizer, plan_model
from distrun.convert.transforms.output import plan_output
from distrun.convert.transforms.scaling import plan_scaling
from distrun.convert.transforms.setup import plan_setup


def run(source: str, module: cst.Module, options: ConvertOptions) -> ConvertResult:
    facts = Facts.build(module)
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
    plan = Plan(facts, Names.avoiding(facts.bound_names, facts.imports), options)
    plan_devices(facts, plan)
    plan_data(facts, plan)
    models = plan_model(facts, plan)
    prepare_remaining_loaders(plan)
    shard_eval_loaders(facts, plan, models)
    plan_amp(facts, plan, options.amp, models)
    plan_no_sync(facts, plan, models)
    plan_scaling(facts, plan)
    plan_checkpoints(facts, plan, models)
    plan_output(facts, plan)
    plan_hazards(facts, plan)
    plan_setup(facts, plan)
    output = plan.apply().code
    return ConvertResult(source, output, "converted", plan.changes, plan.findings)


def _looks_like_training(facts: Facts) -> bool:
    """Torch is imported and something trains: an optimizer, a DataLoader or a backward()."""
    uses_torch = any(q == "torch" or q.startswith("torch.") for q in facts.imports.values())
    if not uses_torch:
        return False
    for call in facts.calls:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            return True
        if is_optimizer(facts, call) or facts.call_name(call) in DATALOADER:
            return True
    return False
