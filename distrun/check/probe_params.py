"""The probe's `params` fact: a fingerprint of every parameter an optimizer updates, by name.

Names come from torch's global registration hooks (`watch_owners`, installed before the
script builds its model: called when a module is built, never in a step), else from one
look through the live modules. What is only this rank's part by design is counted, not
compared: a ZeRO-3 shard, an FSDP2 DTensor; under DeepSpeed ZeRO the model's own
parameters stand for the optimizer's shards. Fingerprinting reads tensors and never
changes them, and runs no collective.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import torch

from distrun.check.fingerprint import fingerprint
from distrun.check.probe_state import Optimizer, State

SAMPLE = 4096  # elements fingerprinted per parameter in the default check's window


def record_params(state: State, optimizer: torch.optim.Optimizer, entry: Optimizer) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if entry.names is None or (entry.params is None and len(entry.names) != len(params)):
        # (named again when the script gives the optimizer another group: add_param_group)
        entry.params = _zero_model_params(optimizer)
        entry.names = _names(entry.params or params)
    record_named(state, entry, entry.params or params)


def record_named(state: State, entry: Optimizer, params: list[torch.Tensor]) -> None:
    """The `params` fact of `params`, named once (`entry.names`)."""
    if entry.names is None:
        entry.names = _names(params)
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


# -- names ----------------------------------------------------------------------------


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


def watch_owners() -> None:
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
        return _unique([str(n) for n in known])
    found = _names_of_live_modules([p for p, n in zip(params, known, strict=True) if not n])
    return _unique([n or found.get(id(p), f"param[{i}]")
                    for i, (p, n) in enumerate(zip(params, known, strict=True))])


def _unique(names: list[str]) -> list[str]:
    """Two models of one class in one optimizer (CycleGAN's generators over
    `itertools.chain`) name their parameters alike: the second one's get `#2`, and so on,
    in the optimizer's order (the same on every rank), so that none hides another."""
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return unique


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
