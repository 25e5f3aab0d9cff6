"""Detection: is the script already distributed, or does it spawn processes itself?

A script that already sets up torch.distributed (init_process_group, DDP, a
DistributedSampler, accelerate, DeepSpeed, Horovod) is left byte-identical. A script
that starts its own worker processes (`mp.spawn`, Hogwild `Process`) is not converted:
nesting it under torchrun would start N x N processes.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.syntax import walk

_DISTRIBUTED_PREFIXES = (
    "torch.distributed.", "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.", "torch.utils.data.distributed.",
    "torch.utils.data.DistributedSampler",
    "accelerate.", "deepspeed.", "horovod.", "lightning.", "pytorch_lightning.",
)
SPAWN = frozenset({
    "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
    "torch.multiprocessing.Process", "multiprocessing.Process",
})


# What asks whether a process group runs: a use of it, not one.
_QUERIES = frozenset({"torch.distributed.is_available", "torch.distributed.is_initialized",
                      "torch.distributed.is_torchelastic_launched"})


def already_distributed(facts: Facts) -> cst.Call | None:
    """The first live use of a distributed API, or None. Dormant helpers do not count
    (torchvision's detection reference `utils.py`, copied with its tutorial into many
    projects: `init_distributed_mode` never called, `reduce_dict` and `all_gather`
    behind `if world_size < 2: return`, `dist.barrier()` behind
    `if not is_dist_avail_and_initialized(): return`): a project whose entry never sets
    a process group up trains on one process, and is converted."""
    guards = _guard_functions(facts)
    for node in [*facts.calls]:
        name = facts.call_name(node) or ""
        if not (name.startswith(_DISTRIBUTED_PREFIXES) or name in ("torch.distributed",)):
            continue
        if name in _QUERIES or _dormant(facts, node, guards):
            continue
        return node
    return None


def _guard_functions(facts: Facts) -> set[str]:
    """Names of the project's functions that tell whether a process group runs:
    `is_dist_avail_and_initialized()` (calls `dist.is_initialized()`), and those that
    return after one (`get_world_size()`, `get_rank()`, `is_main_process()`), two deep."""
    found: set[str] = set()
    for _ in range(3):
        for func in facts.function_defs:
            if func.name.value in found:
                continue
            for call in facts.calls_in(func):
                name = facts.call_name(call) or ""
                if name in _QUERIES or dotted(call.func) in found:
                    found.add(func.name.value)
                    break
    return found


def _asks(facts: Facts, node: cst.CSTNode, guards: set[str], bound: set[str]) -> bool:
    """Does the expression `node` ask whether a process group runs (a query, a guard
    function, a name bound to one's result: `world_size = get_world_size()`)?"""
    for inner in walk(node):
        if isinstance(inner, cst.Call) and ((facts.call_name(inner) or "") in _QUERIES
                                            or dotted(inner.func) in guards):
            return True
        if isinstance(inner, cst.Name) and inner.value in bound:
            return True
    return False


def _dormant(facts: Facts, call: cst.Call, guards: set[str]) -> bool:
    """Is `call` in a function of an imported module that nothing calls, or behind a
    test of whether a process group runs (an `if` around it, or one before it in its
    function that returns)? (The entry's own functions count: a module of functions
    only, converted, is already distributed.)"""
    func = facts.function(call)
    called = {(dotted(c.func) or "").rsplit(".", 1)[-1] for c in facts.calls}
    if func is not None and not facts.module_of(call).is_entry and \
            func.name.value not in called:
        return True
    bound = {dotted(t.target) or "" for a in facts.assigns if isinstance(a, cst.Assign)
             and facts.function(a) is func and _asks(facts, a.value, guards, set())
             for t in a.targets}
    for up in facts.ancestors(call):
        if isinstance(up, cst.If) and _asks(facts, up.test, guards, bound):
            return True
    if func is None:
        return False
    for stmt in walk(func.body):
        if isinstance(stmt, cst.If) and facts.line(stmt) < facts.line(call) and _asks(
                facts, stmt.test, guards, bound) and any(
                isinstance(n, cst.Return) for n in walk(stmt.body)) and not facts.inside(
                call, stmt):
            return True
    return False


def spawns_processes(facts: Facts) -> cst.Call | None:
    for call in facts.calls:
        if facts.call_name(call) in SPAWN:
            return call
    return None
