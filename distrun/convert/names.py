"""Names: the identifiers a converted script introduces, chosen not to clash with its own.

`Names.avoiding(...)` picks the fixed names (RANK, DEVICE, dist, DDP...) once; a name
the script already binds gets a trailing underscore (`RANK_`), and an import of exactly
the module we need is reused. `fresh(base)` gives any other new name (a hoisted
dataset, a GradScaler) and remembers it, so two transforms never pick the same one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# What the converter's own module names must denote to be reused as they are.
_MODULES = {
    "dist": "torch.distributed",
    "ddp": "torch.nn.parallel.DistributedDataParallel",
    "sampler": "torch.utils.data.distributed.DistributedSampler",
    "gc": "gc",
    "os": "os",
    "contextlib": "contextlib",
    "itertools": "itertools",
    "copy": "copy",
}


_FIXED = ("local_rank", "rank", "world_size", "device", "dist", "ddp", "sampler", "gc", "os",
          "contextlib", "accelerator", "rank0_value", "rank0_split", "shard_loader", "auto_epoch",
          "rank_share", "itertools", "rank_batches", "rank0_only", "gather_batch", "copy",
          "plain_module", "keep_plain_copy", "rank_share_batches", "rank0_first",
          "rank0_call", "barrier", "mean_over_ranks", "average_gradients",
          "broadcast_parameters", "rank_slice", "shard_loader_class", "rank0_draws",
          "batch_sum", "gather_rows", "whole_loader",
          "averaged_gradients")


@dataclass
class Names:
    local_rank: str = "LOCAL_RANK"
    rank: str = "RANK"
    world_size: str = "WORLD_SIZE"
    device: str = "DEVICE"
    dist: str = "dist"
    ddp: str = "DDP"
    sampler: str = "DistributedSampler"
    gc: str = "gc"
    os: str = "os"
    contextlib: str = "contextlib"
    accelerator: str = "accelerator"
    rank0_value: str = "rank0_value"
    rank0_split: str = "rank0_split"
    shard_loader: str = "shard_loader"
    auto_epoch: str = "AutoEpochSampler"
    rank_share: str = "RankShareSampler"
    itertools: str = "itertools"
    rank_batches: str = "rank_batches"
    rank0_only: str = "Rank0Only"
    gather_batch: str = "gather_batch"
    copy: str = "copy"
    plain_module: str = "plain_module"
    keep_plain_copy: str = "keep_plain_copy"
    rank_share_batches: str = "RankShareBatchSampler"
    rank0_first: str = "rank0_first"
    rank0_call: str = "rank0_call"
    barrier: str = "barrier_if_initialized"
    mean_over_ranks: str = "mean_over_ranks"
    average_gradients: str = "average_gradients"
    broadcast_parameters: str = "broadcast_parameters"
    rank_slice: str = "rank_slice"
    shard_loader_class: str = "shard_loader_class"
    rank0_draws: str = "rank0_draws"
    batch_sum: str = "batch_sum"
    gather_rows: str = "gather_rows"
    whole_loader: str = "whole_loader"
    averaged_gradients: str = "averaged_gradients"
    taken: set[str] = field(default_factory=set, repr=False)
    made: list[str] = field(default_factory=list, repr=False)  # what `fresh` returned

    @classmethod
    def avoiding(cls, bound: Iterable[str], imports: Mapping[str, str]) -> Names:
        chosen = cls(taken=set(bound))
        for attr in _FIXED:
            name = getattr(chosen, attr)
            # An existing import of exactly what we need is reused; anything else bound
            # under that name makes us pick another.
            wanted = _MODULES.get(attr)
            reusable = wanted is not None and imports.get(name) == wanted
            while (name in chosen.taken or name in imports) and not reusable:
                name = f"{name}_"
                reusable = wanted is not None and imports.get(name) == wanted
            setattr(chosen, attr, name)
        return chosen

    def fresh(self, base: str) -> str:
        """`base`, or `base_`, `base__`... the first that nothing in the script binds and
        no earlier call returned."""
        name = base
        while name in self.taken:
            name = f"{name}_"
        self.taken.add(name)
        self.made.append(name)
        return name

    def introduced(self) -> set[str]:
        """Every name a converted script may define that the original did not."""
        return {*(getattr(self, attr) for attr in _FIXED), *self.made}
