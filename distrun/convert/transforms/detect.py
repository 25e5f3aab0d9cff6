"""Detection: is the script already distributed, or does it spawn processes itself?

A script that already sets up torch.distributed (init_process_group, DDP, a
DistributedSampler, accelerate, DeepSpeed, Horovod) is left byte-identical. A script
that starts its own worker processes (`mp.spawn`, Hogwild `Process`) is not converted:
nesting it under torchrun would start N x N processes.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts

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


def already_distributed(facts: Facts) -> cst.Call | None:
    """The first use of a distributed API, or None."""
    for node in [*facts.calls]:
        name = facts.call_name(node) or ""
        if name.startswith(_DISTRIBUTED_PREFIXES) or name in ("torch.distributed",):
            return node
    return None


def spawns_processes(facts: Facts) -> cst.Call | None:
    for call in facts.calls:
        if facts.call_name(call) in SPAWN:
            return call
    return None
