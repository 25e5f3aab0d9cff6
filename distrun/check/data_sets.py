"""The data sets a DistributedSampler shards, compared across ranks: each rank must hold
the same one (the sampler gives each rank its part of the indices, assuming the same
samples behind them everywhere). Ranks that built theirs differently (a table shuffled
or split without a seed before the loader: pandas' `df.sample(frac=1)`, scikit-learn's
`train_test_split`) train on parts of data sets that differ, with exit 0.
The fingerprints are probe_loaders.py's `_content`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from distrun.check.rules import Finding

Key = tuple[str, int]  # a loader: the file:line that made it, and its number there


@dataclass
class LoaderFacts:
    """A loader's first batch on one rank (probe.py's `loader` fact)."""

    first: str
    batch: int | None
    length: int | None  # batches per epoch
    dataset: int | None
    sampler: str
    replacement: bool
    split: dict[str, Any] | None = None  # probe_loaders.py's _split: the Subset/sampler indices
    content: str | None = None  # probe_loaders.py's _content, under a DistributedSampler


class _RankFacts(Protocol):  # verdict.py's RankFacts, as read here
    @property
    def rank(self) -> int: ...
    @property
    def loaders(self) -> Mapping[Key, LoaderFacts]: ...


def contents_differ(ranks: Sequence[_RankFacts], keys: Iterable[Key]
                    ) -> list[tuple[object, Finding]]:
    """A finding for each loader (by key) whose data set holds other values on some rank
    than on the first, with the same length."""
    found: list[tuple[object, Finding]] = []
    for key in sorted(keys):
        facts = [r.loaders[key] for r in ranks]
        contents = {f.content for f in facts}
        if None in contents or len(contents) < 2 or len({f.dataset for f in facts}) > 1:
            continue
        other = next(r.rank for r, f in zip(ranks, facts, strict=True)
                     if f.content != facts[0].content)
        found.append((("split", key), Finding(
            "split-differs", f"the data set this DataLoader's DistributedSampler shards "
            f"holds other samples on rank {ranks[0].rank} than on rank {other} (the same "
            "length, other values: data shuffled, split or drawn without a seed before "
            "the loader, e.g. pandas' `df.sample(frac=1)` or `train_test_split`)", key[0])))
    return found
