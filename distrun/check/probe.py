"""Inside each worker of `distrun launch --check`: watch the training, write down facts.

Installed by boot.py right after the script imports torch. Each fact is one JSON line in
`$DISTRUN_CHECK_DIR/rank<RANK>.jsonl`, written at once (a crash loses nothing written
before it); distrun compares the ranks' files (verdict.py) while the job runs. The probe
reads tensors and never changes them, draws no random numbers and runs no collective: a
checked job trains exactly like an unchecked one.

Facts (`kind`):
  start   rank, local rank, world size
  group   init_process_group was called (by the script, accelerate, ...)
  params  after optimizer steps 1, 2, 4, 8... (and --check-steps): a fingerprint of every
          parameter the optimizer updates, by name; whether a process group exists
  loader  a DataLoader's first batch: where it was made (file:line), its length, its data
          set's length, its sampler, the batch's size and fingerprint
  train   an optimizer step happened while that loader was being iterated
  epoch   an iteration of a training loader: its DistributedSampler epoch and shuffle
  write   a file opened for writing (open, torch.save) and the script line that did it
  sharded-save  torch.save, called from the user's code, of a DTensor, a ZeRO-3
          partitioned parameter or a state dict or module holding one
  window  the default check's window ended after K optimizer steps: the probe's per-step
          hooks are removed (what stays is looked at only when a file is written)
  end     steps taken, and why the worker ended (its end, or --check-steps)

`DISTRUN_CHECK_WINDOW=K` (the default check of every launch): after K steps of the first
optimizer the probe takes its hooks out of the optimizers and the DataLoaders, so the rest
of the run executes torch's own code; file writes stay watched (a cost paid per write,
not per step).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import sysconfig
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from distrun.check.fingerprint import batch_fingerprint, fingerprint

_SKIP_PREFIXES = tuple(os.path.join(path, "") for path in (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.dirname(os.path.abspath(torch.__file__)),
    *{sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}))
_NOT_WRITES = ("/dev/", "/proc/", "/sys/")
_CACHES = ("/.cache/", "/__pycache__/", "/torchinductor_", "/.triton/")


class _State:
    def __init__(self, folder: str, rank: int, steps: int | None,
                 window: int | None = None) -> None:
        path = os.path.join(folder, f"rank{rank}.jsonl")
        self.out = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (kept open)
        self.folder = os.path.abspath(folder)
        self.lock = threading.Lock()
        self.end_after = steps
        self.window = window  # remove the per-step hooks after this many steps
        self.closing = False  # the window is over: unhook at the next chance
        self.undo: list[Callable[[], None]] = []
        self.optimizers: dict[int, _Optimizer] = {}
        self.loaders: weakref.WeakKeyDictionary[Any, _Loader] = weakref.WeakKeyDictionary()
        self.iterators: weakref.WeakKeyDictionary[Any, _Iteration] = (
            weakref.WeakKeyDictionary())
        self.sites: dict[str, int] = {}
        self.current: _Iteration | None = None
        self.written: set[str] = set()
        self.group = False
        self.pid = os.getpid()

    def fact(self, kind: str, **values: object) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker: not this rank's facts
            return
        with self.lock:
            self.out.write(json.dumps({"kind": kind, **values}) + "\n")


class _Optimizer:
    def __init__(self, index: int) -> None:
        self.index = index
        self.steps = 0
        self.names: list[str] | None = None
        self.params: list[torch.Tensor] | None = None  # the model's, when ZeRO shards these


class _Loader:
    def __init__(self, site: str, number: int) -> None:
        self.site = site
        self.number = number  # loaders made at the same line: 0, 1, 2...
        self.seen_first = False
        self.train = False


class _Iteration:
    def __init__(self, loader: _Loader, epoch: int | None, shuffle: bool) -> None:
        self.loader = loader
        self.epoch = epoch
        self.shuffle = shuffle
        self.trained = False


_state: _State | None = None


def install() -> None:
    """Patch torch to record facts; nothing happens outside a `--check` job. A probe that
    cannot be installed says so and leaves the job to run unchecked."""
    global _state
    folder, rank = os.environ.get("DISTRUN_CHECK_DIR"), os.environ.get("RANK")
    if _state is not None or not folder or rank is None:
        return
    try:
        steps = os.environ.get("DISTRUN_CHECK_STEPS")
        window = os.environ.get("DISTRUN_CHECK_WINDOW")
        _state = _State(folder, int(rank), int(steps) if steps else None,
                        int(window) if window else None)
        _state.fact("start", rank=int(rank), local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                    world=int(os.environ.get("WORLD_SIZE", 1)))
        _patch()
    except Exception as err:  # noqa: BLE001 (the job must run, checked or not)
        _state = None
        print(f"distrun: check: the probe could not be installed in rank {rank} "
              f"({type(err).__name__}: {err}); this rank runs unchecked", file=sys.stderr)


def _patch() -> None:
    import torch.distributed
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    _watch_owners()
    _watch_first_backward()
    handle = register_optimizer_step_post_hook(_after_step)
    if _state is not None:
        _state.undo.append(handle.remove)
    _patch_loaders(DataLoader, _BaseDataLoaderIter)
    if torch.distributed.is_available():
        torch.distributed.init_process_group = _recording_init(
            torch.distributed.init_process_group)
        _watch_collectives(torch.distributed)
    torch.save = _recording_save(torch.save)
    sys.addaudithook(_audit)
    atexit.register(_at_exit)


# -- where in the user's code ---------------------------------------------------------


def user_site(depth: int = 2) -> str:
    """file:line of the innermost caller that is the user's code (not torch, distrun, the
    standard library or an installed package)."""
    frame: FrameType | None
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return "?"
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not name.startswith(_SKIP_PREFIXES):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


# -- fingerprints ---------------------------------------------------------------------


def _after_step(optimizer: torch.optim.Optimizer, _args: object, _kwargs: object) -> None:
    state = _state
    if state is None or os.getpid() != state.pid:
        return
    entry = state.optimizers.get(id(optimizer))
    if entry is None:
        entry = state.optimizers[id(optimizer)] = _Optimizer(len(state.optimizers))
    if state.closing:
        return
    entry.steps += 1
    _mark_training(state)
    last = state.end_after is not None and entry.index == 0 and entry.steps >= state.end_after
    closing = state.window is not None and entry.index == 0 and entry.steps >= state.window
    if entry.steps & (entry.steps - 1) == 0 or last or closing:  # 1, 2, 4, 8... and the last
        _record_params(state, optimizer, entry)
    if last:
        _end(state, "check-steps")
        os._exit(0)
    if closing:
        state.closing = True  # removed at the next loader call: not inside torch's hook loop
        state.fact("window", steps=entry.steps)


def _watch_first_backward() -> None:
    """A `backward` fact at the first backward pass (then torch's own function is put
    back): a script that updates its parameters by hand (`p.data.add_(p.grad, ...)`)
    trains without an optimizer step, and is no `[no-training]`."""
    import torch.autograd

    original = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        if torch.autograd.backward is backward:
            torch.autograd.backward = original
        if _state is not None:
            _state.fact("backward")
        return original(*args, **kwargs)

    torch.autograd.backward = backward


def _close(state: _State) -> None:
    """The window is over: every per-step hook is taken out (torch's own methods back on
    the DataLoader classes, the optimizer hook removed)."""
    undo, state.undo = state.undo, []
    for step in reversed(undo):
        step()


def _record_params(state: _State, optimizer: torch.optim.Optimizer, entry: _Optimizer) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if entry.names is None:
        entry.params = _zero_model_params(optimizer)
        entry.names = _names(entry.params or params)
    params = entry.params or params
    named = list(zip(entry.names, params, strict=True))
    sample = SAMPLE if state.window is not None else None
    values = {name: fingerprint(p, sample) for name, p in named if not _sharded(p)}
    group = torch.distributed.is_available() and torch.distributed.is_initialized()
    state.fact("params", optimizer=entry.index, step=entry.steps, group=bool(group),
               values=values, sharded=len(named) - len(values))


def _sharded(param: torch.Tensor) -> bool:
    """A ZeRO-3 parameter held as this rank's shard (the module's tensor is empty): its
    shards differ by design, and gathering it would add a collective to the job."""
    whole = getattr(param, "ds_numel", None)
    return whole is not None and param.numel() != whole or _fsdp_shard(param)


def _fsdp_shard(param: torch.Tensor) -> bool:
    """An FSDP2 parameter: a DTensor sharded over the ranks. Each rank's local shard is
    its own by design, and `full_tensor()` would add a collective to the job; a parameter
    FSDP2 does not hold (a model left unsharded) is a plain tensor, compared as usual."""
    placements = getattr(param, "placements", None)
    return placements is not None and any(
        getattr(p, "is_shard", lambda: False)() for p in placements)


def _zero_model_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor] | None:
    """Under DeepSpeed ZeRO the optimizer holds this rank's shard of the weights, which
    differs from rank to rank by design: the model's own parameters are compared instead.
    ZeRO gathers them after the optimizer's step, so they are compared as they were
    before it (a divergence shows one step later)."""
    engine_module = sys.modules.get("deepspeed.runtime.engine")
    engine_class = getattr(engine_module, "DeepSpeedEngine", None)
    if engine_class is None:
        return None
    for obj in gc.get_objects():
        if issubclass(type(obj), engine_class):
            wrapper = obj.__dict__.get("optimizer")
            if wrapper is optimizer or getattr(wrapper, "optimizer", None) is optimizer:
                return list(obj.module.parameters())
    return None


SAMPLE = 4096  # elements fingerprinted per parameter in the default check's window


class _Owners:
    """Who holds each parameter and module, as torch registers them (global registration
    hooks: called when a model is built, never in a step), so that a parameter's name is
    found without looking through every live object."""

    def __init__(self) -> None:
        self.of: dict[int, tuple[weakref.ref[Any], weakref.ref[Any], str]] = {}

    def add(self, owner: Any, name: str, obj: Any) -> None:
        try:
            self.of[id(obj)] = (weakref.ref(obj), weakref.ref(owner), name)
        except TypeError:
            pass

    def name(self, param: torch.Tensor) -> str | None:
        """`fc1.weight` (the outermost module's path; a DDP wrapper's `module.` left out)."""
        parts: list[str] = []
        obj: Any = param
        for _ in range(64):
            entry = self.of.get(id(obj))
            if entry is None or entry[0]() is not obj:
                break
            owner = entry[1]()
            if owner is None:
                return None
            parts.append(entry[2])
            obj = owner
        if not parts:
            return None
        return ".".join(reversed(parts)).removeprefix("module.")


_owners = _Owners()


def _watch_owners() -> None:
    from torch.nn.modules.module import (
        register_module_module_registration_hook,
        register_module_parameter_registration_hook,
    )

    def parameter(module: Any, name: str, param: Any) -> None:
        if param is not None:
            _owners.add(module, name, param)

    def submodule(module: Any, name: str, child: Any) -> None:
        if child is not None:
            _owners.add(module, name, child)

    register_module_parameter_registration_hook(parameter)
    register_module_module_registration_hook(submodule)


def _names(params: list[torch.Tensor]) -> list[str]:
    """Each parameter's name in the outermost module that holds it (`module.` of a DDP
    wrapper left out), from the registrations seen since torch was imported; for any not
    seen, found once among the live modules; else its place in the groups."""
    known = [_owners.name(p) for p in params]
    if all(known):
        return [str(n) for n in known]
    found = _names_of_live_modules([p for p, n in zip(params, known, strict=True) if not n])
    return [n or found.get(id(p), f"param[{i}]")
            for i, (p, n) in enumerate(zip(params, known, strict=True))]


def _names_of_live_modules(params: list[torch.Tensor]) -> dict[int, str]:
    module = torch.nn.Module  # type(), not isinstance: no object's __class__ is asked for
    modules = [obj for obj in gc.get_objects() if issubclass(type(obj), module)]
    inner = {id(child) for module in modules for child in module.children()}
    found: dict[int, str] = {}
    wanted = {id(p) for p in params}
    for root in modules:
        if id(root) in inner:
            continue
        for name, param in root.named_parameters():
            if id(param) in wanted and id(param) not in found:
                found[id(param)] = name.removeprefix("module.")
    return found


# -- data loaders ---------------------------------------------------------------------


def _patch_loaders(loader_class: Any, iterator_class: Any) -> None:
    make, start, step = loader_class.__init__, loader_class.__iter__, iterator_class.__next__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        make(self, *args, **kwargs)
        state = _state
        if state is not None and self not in state.loaders:
            site = user_site()
            number = state.sites.get(site, 0)
            state.sites[site] = number + 1
            state.loaders[self] = _Loader(site, number)

    def __iter__(self: Any) -> Any:
        iterator = start(self)
        state = _state
        loader = state.loaders.get(self) if state is not None else None
        if state is not None and loader is not None:
            sampler = _distributed_sampler(self)
            try:
                state.iterators[iterator] = _Iteration(
                    loader, getattr(sampler, "epoch", None),
                    bool(getattr(sampler, "shuffle", False)))
            except TypeError:  # an iterator that cannot be referenced weakly
                pass
        return iterator

    def __next__(self: Any) -> Any:
        batch = step(self)
        state = _state
        iteration = state.iterators.get(self) if state is not None else None
        if state is not None and iteration is not None:
            state.current = iteration
            if not iteration.loader.seen_first:
                iteration.loader.seen_first = True
                _record_loader(state, self, iteration.loader, batch)
        return batch

    def __iter__and_close(self: Any) -> Any:
        if _state is not None and _state.closing:
            _close(_state)
            return start(self)
        return __iter__(self)

    def __next__and_close(self: Any) -> Any:
        if _state is not None and _state.closing:
            _close(_state)
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
    if _state is not None:
        _state.undo.append(undo)


def _distributed_sampler(loader: Any) -> object | None:
    from torch.utils.data.distributed import DistributedSampler

    for sampler in (getattr(loader, "sampler", None),
                    getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if isinstance(sampler, DistributedSampler):
            return sampler
    return None


def _record_loader(state: _State, iterator: Any, loader: _Loader, batch: object) -> None:
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
               split=_split(dataset, inner))


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


def _mark_training(state: _State) -> None:
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


# -- collectives: the last one each rank entered (hang reports) -----------------------

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "barrier", "all_to_all",
               "all_to_all_single", "gather", "scatter", "all_gather_object",
               "broadcast_object_list", "gather_object", "scatter_object_list", "send",
               "recv", "monitored_barrier")
RECORD = 512  # bytes of coll<RANK>: the last collective, as one JSON line


class _Collectives:
    """The script's calls of torch.distributed's collectives, counted; the last one is
    kept in a small memory-mapped file (`coll<RANK>`: sequence number, name, shape and
    dtype of its tensor, the script's line, whether it returned) that distrun reads when
    a job goes quiet. Costs a counter and a write to memory per collective; kept for the
    whole run (not only the window)."""

    def __init__(self, folder: str, rank: int) -> None:
        import mmap

        path = os.path.join(folder, f"coll{rank}")
        with open(path, "wb") as stream:
            stream.write(b" " * RECORD)
        self.stream = open(path, "r+b")  # noqa: SIM115 (kept open)
        self.map = mmap.mmap(self.stream.fileno(), RECORD)
        self.seq = 0

    def enter(self, record: dict[str, object]) -> None:
        """The record, its state first and "in " (3 bytes: `returned` overwrites them)."""
        data = json.dumps({"state": "in ", **record}).encode()[:RECORD - 1]
        self.map[:RECORD] = data.ljust(RECORD - 1) + b"\n"

    def returned(self) -> None:
        self.map[STATE:STATE + 3] = b"out"


STATE = len('{"state": "')  # where the state's 3 bytes are in the record


def _watch_collectives(module: Any) -> None:
    state = _state
    if state is None:
        return
    watch = _Collectives(state.folder, int(os.environ.get("RANK", 0)))
    for name in COLLECTIVES:
        function = getattr(module, name, None)
        if callable(function):
            setattr(module, name, _counted(watch, name, function))


def _counted(watch: _Collectives, name: str, function: Callable[..., Any]
             ) -> Callable[..., Any]:
    def collective(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() != _pid:  # a forked worker: not this rank's
            return function(*args, **kwargs)
        watch.seq += 1
        seq = watch.seq
        tensor = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)),
                      None)
        if tensor is None:
            listed = next((a for a in args if isinstance(a, list) and a
                           and isinstance(a[0], torch.Tensor)), None)
            tensor = listed[0] if listed else None
        shape = list(tensor.shape) if tensor is not None else None
        dtype = str(tensor.dtype).removeprefix("torch.") if tensor is not None else None
        watch.enter({"seq": seq, "op": name, "shape": shape, "dtype": dtype,
                     "site": user_site(2)})
        result = function(*args, **kwargs)
        watch.returned()
        return result

    collective.__wrapped__ = function  # type: ignore[attr-defined]
    collective.__doc__ = function.__doc__
    collective.__name__ = name
    return collective


_pid = os.getpid()


# -- process group, files, the end ----------------------------------------------------


def _recording_init(init: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = init(*args, **kwargs)
        if _state is not None and not _state.group:
            _state.group = True
            _state.fact("group", backend=str(torch.distributed.get_backend()))
        return result

    init_process_group.__wrapped__ = init  # type: ignore[attr-defined]
    init_process_group.__doc__ = init.__doc__
    return init_process_group


def _recording_save(save: Callable[..., Any]) -> Callable[..., Any]:
    def saved(obj: object, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)):
            _written(os.fspath(f))
        state = _state
        if state is not None and os.getpid() == state.pid and _from_user(sys._getframe(1)):
            try:
                shard = _shard_in(obj)
            except Exception:  # noqa: BLE001 (an object the probe cannot look into)
                shard = None
            if shard is not None:
                state.fact("sharded-save", site=user_site(2), what=shard[0], name=shard[1],
                           path=os.fspath(f) if isinstance(f, (str, os.PathLike)) else "")
        return save(obj, f, *args, **kwargs)

    saved.__wrapped__ = save  # type: ignore[attr-defined]
    saved.__doc__ = save.__doc__
    return saved


def _from_user(frame: FrameType | None) -> bool:
    """Whether `frame` (the caller of torch.save) is the user's code: DeepSpeed's and
    torch's own checkpoint code saves shards by design."""
    if frame is None:
        return False
    name = frame.f_code.co_filename
    return not name.startswith("<") and not name.startswith(_SKIP_PREFIXES)


def _shard_in(obj: object, depth: int = 0) -> tuple[str, str] | None:
    """("dtensor" | "zero3", where) when `obj` is, or holds (a module's parameters, a
    dict or list of them, three levels deep), a tensor that is only this rank's part: a
    DTensor (FSDP2, tensor parallel) or a ZeRO-3 partitioned parameter or its empty
    state-dict entry."""
    if isinstance(obj, torch.Tensor):
        if getattr(obj, "placements", None) is not None:
            return "dtensor", ""
        whole = getattr(obj, "ds_numel", None)
        if whole is not None and obj.numel() != whole:
            return "zero3", ""
        if obj.numel() == 0 and "deepspeed.runtime.zero.partition_parameters" in sys.modules:
            return "zero3", ""
        return None
    if depth >= 3:
        return None
    items: list[tuple[str, object]]
    if isinstance(obj, torch.nn.Module):
        items = list(obj.named_parameters())
    elif isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    else:
        return None
    for key, value in items:
        found = _shard_in(value, depth + 1)
        if found is not None:
            return found[0], f"{key}.{found[1]}" if found[1] else key
    return None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or _state is None:
        return
    path, mode, flags = args
    if isinstance(mode, str):
        writing = any(c in mode for c in "wax+")
    else:
        writing = bool((flags or 0) & (os.O_WRONLY | os.O_RDWR))
    if writing and isinstance(path, (str, bytes, os.PathLike)):
        _written(os.fsdecode(path))


def _written(path: str) -> None:
    state = _state
    if state is None or os.getpid() != state.pid:
        return
    full = os.path.abspath(path)
    if (full in state.written or full.startswith(state.folder) or full.startswith(_NOT_WRITES)
            or any(part in full for part in _CACHES) or full.endswith((".pyc", ".lock"))):
        return
    state.written.add(full)
    state.fact("write", path=full, site=user_site(3))


def _end(state: _State, reason: str) -> None:
    steps = {str(entry.index): entry.steps for entry in state.optimizers.values()}
    state.fact("end", reason=reason, steps=steps, group=state.group)
    state.out.flush()


def _at_exit() -> None:
    if _state is not None and os.getpid() == _state.pid:
        _end(_state, "exit")
        # Free what only the garbage collector frees (a DDP model in a reference cycle,
        # its reducer holding gloo work) while the interpreter is whole: freed during its
        # finalization instead, gloo's threads can abort the process (seen 1 exit in 15).
        gc.collect()
