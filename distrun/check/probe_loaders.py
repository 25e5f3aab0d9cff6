"""The probe's watch on DataLoaders: the `loader`, `train` and `epoch` facts.

`patch_loaders` wraps `DataLoader.__init__` (where in the user's code each loader was
made), `DataLoader.__iter__` (its DistributedSampler's epoch and shuffle at each
iteration) and the iterators' `__next__` (the first batch, fingerprinted); the undo puts
torch's own methods back when the default check's window ends. `mark_training` (called at
each optimizer step) marks the loader being iterated as a training loader. `_split`
sketches the index lists that pick a loader's samples (Subsets, SubsetRandomSampler), so
that ranks reading the same or overlapping samples can be told apart from ranks that
split the data. `_content` fingerprints what a data set sharded by a DistributedSampler
holds (its tensors, arrays, tables and lists), for ranks that built it differently (a
table shuffled or split without a seed before the loader): the sampler then shards data
sets that differ.
"""

from __future__ import annotations

from typing import Any

import torch

from distrun.check import probe_state
from distrun.check.fingerprint import batch_fingerprint
from distrun.check.probe_state import Iteration, Loader, State, user_site


def patch_loaders(loader_class: Any, iterator_class: Any) -> None:
    make, start, step = loader_class.__init__, loader_class.__iter__, iterator_class.__next__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        make(self, *args, **kwargs)
        state = probe_state.state
        if state is not None and self not in state.loaders:
            site = user_site()
            number = state.sites.get(site, 0)
            state.sites[site] = number + 1
            state.loaders[self] = Loader(site, number)

    def __iter__(self: Any) -> Any:
        iterator = start(self)
        state = probe_state.state
        loader = state.loaders.get(self) if state is not None else None
        if state is not None and loader is not None:
            sampler = _distributed_sampler(self)
            if sampler is not None and not loader.content_read:  # before any sample is read
                loader.content_read = True
                loader.content = _content(getattr(self, "dataset", None))
            try:
                state.iterators[iterator] = Iteration(
                    loader, getattr(sampler, "epoch", None),
                    bool(getattr(sampler, "shuffle", False)))
            except TypeError:  # an iterator that cannot be referenced weakly
                pass
        return iterator

    def __next__(self: Any) -> Any:
        batch = step(self)
        state = probe_state.state
        iteration = state.iterators.get(self) if state is not None else None
        if state is not None and iteration is not None:
            state.current = iteration
            if not iteration.loader.seen_first:
                iteration.loader.seen_first = True
                _record_loader(state, self, iteration.loader, batch)
        return batch

    def __iter__and_close(self: Any) -> Any:
        if probe_state.state is not None and probe_state.state.closing:
            probe_state.state.unhook()
            return start(self)
        return __iter__(self)

    def __next__and_close(self: Any) -> Any:
        if probe_state.state is not None and probe_state.state.closing:
            probe_state.state.unhook()
            return step(self)
        return __next__(self)

    def undo() -> None:
        for owner, name, ours, theirs in (
                (loader_class, "__init__", __init__, make),
                (loader_class, "__iter__", __iter__and_close, start),
                (iterator_class, "__next__", __next__and_close, step)):
            if owner.__dict__.get(name) is ours:  # not patched again by someone else
                setattr(owner, name, theirs)

    loader_class.__init__ = __init__
    loader_class.__iter__ = __iter__and_close
    iterator_class.__next__ = __next__and_close
    if probe_state.state is not None:
        probe_state.state.undo.append(undo)


def _distributed_sampler(loader: Any) -> object | None:
    from torch.utils.data.distributed import DistributedSampler

    for sampler in (getattr(loader, "sampler", None),
                    getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if isinstance(sampler, DistributedSampler):
            return sampler
    return None


def _record_loader(state: State, iterator: Any, loader: Loader, batch: object) -> None:
    """The loader's first batch, its batches per epoch (the iterator's length), its data
    set's length and what draws the samples."""
    digest, size = batch_fingerprint(batch)
    dataset = getattr(iterator, "_dataset", None)
    sampler = getattr(iterator, "_index_sampler", None)
    inner = getattr(sampler, "sampler", sampler)
    state.fact("loader", site=loader.site, number=loader.number, first=digest, batch=size,
               length=_length(iterator),
               dataset=_length(dataset), sampler=type(inner).__name__,
               replacement=bool(getattr(inner, "replacement", False)),
               samples=getattr(inner, "num_samples", None) if inner is not None else None,
               split=_split(dataset, inner), content=loader.content)


def mark_training(state: State) -> None:
    iteration = state.current
    if iteration is None or iteration.trained:
        return
    iteration.trained = True
    loader = iteration.loader
    if not loader.train:
        loader.train = True
        state.fact("train", site=loader.site, number=loader.number)
    state.fact("epoch", site=loader.site, number=loader.number, epoch=iteration.epoch,
               shuffle=iteration.shuffle)


# -- what picks a loader's samples ----------------------------------------------------


SKETCH = 32  # hashed indices kept of a split: enough to see two index lists overlap


def _split(dataset: object, sampler: object) -> dict[str, object] | None:
    """What picks this loader's samples out of a larger data set, to compare across ranks:
    the index lists of the `Subset`s around the data set and of the sampler (or of the one
    it wraps: SubsetRandomSampler's `indices`), as their lengths, a hash of them, and a
    sketch of the base samples they read (the SKETCH smallest of their indices, hashed)
    that shows whether two ranks' picks overlap. None when nothing picks by index."""
    lists: list[object] = []  # the data sets' Subset indices, outermost first
    for _ in range(8):
        if dataset is None:
            break
        indices = getattr(dataset, "indices", None)
        if indices is not None and hasattr(dataset, "dataset"):
            lists.append(indices)
        dataset = getattr(dataset, "dataset", None)
    picked: object = None  # the sampler's own list, into the outermost data set
    for _ in range(4):
        if sampler is None:
            break
        picked = getattr(sampler, "indices", None)
        if picked is not None:
            break
        sampler = getattr(sampler, "sampler", None)
    if not lists and picked is None:
        return None
    import hashlib

    try:
        parts = [_int64(indices) for indices in (*lists, *([picked] if picked is not None
                                                             else []))]
        base = parts[-1] if picked is not None else None
        for indices in parts[:len(lists)]:
            base = indices if base is None else indices[base]
    except (TypeError, ValueError, RuntimeError, IndexError):
        return None
    assert base is not None
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part.numpy().tobytes())
        digest.update(b"|")
    hashed = torch.unique((base * 2654435761 + 40503) % (1 << 32))  # one-to-one below 2**32
    return {"lengths": [int(p.numel()) for p in parts], "hash": digest.hexdigest()[:16],
            "sketch": hashed[:SKETCH].tolist()}


def _int64(indices: object) -> torch.Tensor:
    if isinstance(indices, range):
        indices = list(indices)
    return torch.as_tensor(indices, dtype=torch.int64).reshape(-1)


def _length(obj: object) -> int | None:
    try:
        return len(obj)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 (an IterableDataset, a sampler without a length)
        return None


# -- what a data set holds ------------------------------------------------------------


SAMPLED = 1024  # elements of a tensor or array hashed: the first, the last, a stride


def _content(dataset: object) -> str | None:
    """A hash of the data `dataset` holds (and the data sets it wraps): its tensors,
    numpy arrays, pandas tables and lists of plain values, each by attribute name, shape
    and a sample of its values; read without calling `__getitem__` (no random draw, no
    file read). None when it holds none of these."""
    import hashlib

    digest = hashlib.sha1()
    found = False
    for depth in range(4):
        if dataset is None:
            break
        try:
            attributes = sorted(vars(dataset).items())
        except TypeError:
            break
        for name, value in attributes:
            part = _value_digest(value)
            if part is not None:
                found = True
                digest.update(f"{depth}.{name}:".encode() + part)
        dataset = getattr(dataset, "dataset", None)
    return digest.hexdigest()[:16] if found else None


def _value_digest(value: object, depth: int = 0) -> bytes | None:
    if isinstance(value, (list, tuple)) and len(value) > 1 and all(
            isinstance(v, (str, int, float)) for v in value[:64]):
        return repr((len(value), value[:64], value[-64:])).encode()
    if isinstance(value, (list, tuple)) and 0 < len(value) <= 8 and depth == 0:
        parts = [_value_digest(v, 1) for v in value]  # TensorDataset's `tensors`
        return b"|".join(p for p in parts if p is not None) if any(parts) else None
    if type(value).__module__.startswith("pandas") and hasattr(value, "to_numpy"):
        try:
            value = value.to_numpy()
        except Exception:  # noqa: BLE001 (a table of objects pandas cannot stack)
            return None
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            if value.dtype.kind == "O":  # Python objects: their values, never pointers
                shown = repr(value.reshape(-1)[:SAMPLED].tolist())
                return None if " at 0x" in shown else repr(value.shape).encode() + shown.encode()
            if value.dtype.kind not in "biufc":  # fixed-width strings: their bytes
                return repr(value.shape).encode() + value.reshape(-1)[:SAMPLED].tobytes()
            value = torch.from_numpy(np.ascontiguousarray(value))
    except (ImportError, TypeError, ValueError):
        return None
    if not isinstance(value, torch.Tensor) or value.is_sparse:
        return None
    flat = value.detach().reshape(-1)
    if flat.numel() == 0:
        return repr(tuple(value.shape)).encode()
    stride = max(1, flat.numel() // SAMPLED)
    picked = torch.cat([flat[:SAMPLED], flat[-SAMPLED:], flat[::stride][:SAMPLED]])
    return repr((tuple(value.shape), str(value.dtype))).encode() + picked.cpu().numpy().tobytes()
