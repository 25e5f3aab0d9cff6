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
          parameter the optimizer updates, by name; whether a process group exists.
          Without an optimizer, a step is what happens between two backward passes
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

The parts: probe_state.py (the facts file, what was seen, the user's code's lines),
probe_params.py (`params`: parameter names and fingerprints), probe_loaders.py (`loader`,
`train`, `epoch`), probe_collectives.py (the last collective, for hang reports) and
probe_writes.py (`write`, `sharded-save`). This module installs them and keeps the
optimizer step hook, the process group and the end; probe_hand.py counts the steps of
parameters updated by hand.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from distrun.check import probe_state
from distrun.check.probe_collectives import watch_collectives
from distrun.check.probe_hand import hand_step, last_hand_step
from distrun.check.probe_loaders import mark_training, patch_loaders
from distrun.check.probe_params import record_params, watch_owners
from distrun.check.probe_state import Optimizer, State
from distrun.check.probe_writes import audit, recording_save


def install() -> None:
    """Patch torch to record facts; nothing happens outside a `--check` job. A probe that
    cannot be installed says so and leaves the job to run unchecked."""
    folder, rank = os.environ.get("DISTRUN_CHECK_DIR"), os.environ.get("RANK")
    if probe_state.state is not None or not folder or rank is None:
        return
    try:
        steps = os.environ.get("DISTRUN_CHECK_STEPS")
        window = os.environ.get("DISTRUN_CHECK_WINDOW")
        state = probe_state.state = State(folder, int(rank), int(steps) if steps else None,
                                          int(window) if window else None)
        state.fact("start", rank=int(rank), local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                   world=int(os.environ.get("WORLD_SIZE", 1)))
        _patch()
    except Exception as err:  # noqa: BLE001 (the job must run, checked or not)
        probe_state.state = None
        print(f"distrun: check: the probe could not be installed in rank {rank} "
              f"({type(err).__name__}: {err}); this rank runs unchecked", file=sys.stderr)


def _patch() -> None:
    import torch.distributed
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    watch_owners()
    _watch_backward()
    handle = register_optimizer_step_post_hook(_after_step)
    if probe_state.state is not None:
        probe_state.state.undo.append(handle.remove)
    patch_loaders(DataLoader, _BaseDataLoaderIter)
    if torch.distributed.is_available():
        torch.distributed.init_process_group = _recording_init(
            torch.distributed.init_process_group)
        watch_collectives(torch.distributed)
    torch.save = recording_save(torch.save)
    sys.addaudithook(audit)
    atexit.register(_at_exit)


# -- optimizer steps ------------------------------------------------------------------


def _after_step(optimizer: torch.optim.Optimizer, _args: object, _kwargs: object) -> None:
    state = probe_state.state
    if state is None or os.getpid() != state.pid:
        return
    entry = state.optimizers.get(id(optimizer))
    if entry is None:
        entry = state.optimizers[id(optimizer)] = Optimizer(len(state.optimizers))
    if not state.closing:
        stepped(state, entry, lambda: record_params(state, optimizer, entry))


def stepped(state: State, entry: Optimizer, record: Callable[[], None]) -> None:
    """One more step of `entry` (an optimizer's, or the parameters updated by hand:
    probe_hand.py): its parameters recorded after steps 1, 2, 4, 8... and the last."""
    entry.steps += 1
    mark_training(state)
    last = state.end_after is not None and entry.index == 0 and entry.steps >= state.end_after
    closing = state.window is not None and entry.index == 0 and entry.steps >= state.window
    if entry.steps & (entry.steps - 1) == 0 or last or closing:  # 1, 2, 4, 8... and the last
        record()
    if last:
        _end(state, "check-steps")
        if os.environ.get("DISTRUN_CHECK_END") == "raise":  # a Ray worker: it lives on
            raise SystemExit(0)
        os._exit(0)
    if closing:
        state.closing = True  # removed at the next loader call: not inside torch's hook loop
        state.fact("window", steps=entry.steps)


def _watch_backward() -> None:
    """A `backward` fact at the first backward pass. A script that updates its
    parameters by hand (`p.data.add_(p.grad, ...)`, no optimizer) trains without an
    optimizer step, and is no `[no-training]`: its steps are counted between backward
    passes (probe_hand.py); otherwise torch's own function is put back at the second."""
    import torch.autograd

    original = torch.autograd.backward
    calls = [0]

    def restore() -> None:
        if torch.autograd.backward is backward:
            torch.autograd.backward = original

    def backward(*args: Any, **kwargs: Any) -> Any:
        state = probe_state.state
        calls[0] += 1
        if state is None or os.getpid() != state.pid:
            pass
        elif calls[0] == 1:
            state.fact("backward")
            state.undo.append(restore)
        elif not hand_step(state, args[0] if args else kwargs.get("tensors"), stepped):
            restore()
        return original(*args, **kwargs)

    torch.autograd.backward = backward


# -- process group, the end -----------------------------------------------------------


def _recording_init(init: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = init(*args, **kwargs)
        state = probe_state.state
        if state is not None and not state.group:
            state.group = True
            state.fact("group", backend=str(torch.distributed.get_backend()))
        return result

    init_process_group.__wrapped__ = init  # type: ignore[attr-defined]
    init_process_group.__doc__ = init.__doc__
    return init_process_group


def _end(state: State, reason: str) -> None:
    if state.ended:
        return
    state.ended = True
    steps = {str(entry.index): entry.steps for entry in state.optimizers.values()}
    state.fact("end", reason=reason, steps=steps, group=state.group)
    state.out.flush()


def finish() -> None:
    """The rank's end facts, written once: at exit, or when a worker that lives on
    after the script (a Ray Train worker, ray_worker.py) says the script has ended."""
    _at_exit()


def _at_exit() -> None:
    state = probe_state.state
    if state is not None and os.getpid() == state.pid and not state.ended:
        last_hand_step(state)
        _end(state, "exit")
        # Free what only the garbage collector frees (a DDP model in a reference cycle,
        # its reducer holding gloo work) while the interpreter is whole: freed during its
        # finalization instead, gloo's threads can abort the process (seen 1 exit in 15).
        gc.collect()
