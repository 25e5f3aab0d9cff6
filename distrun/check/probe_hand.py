"""The steps of a script that updates its parameters by hand, with no optimizer.

`for p in model.parameters(): p.data.add_(p.grad.data, alpha=-lr)` after
`loss.backward()` (PyTorch's NLP-from-scratch tutorials, lecture code) takes no optimizer
step: the probe's step hook never runs, so nothing would be compared. Here a step is what
happens between two backward passes: at the second backward pass, if no optimizer has
been made, the parameters the loss reaches (the leaves of its graph that require a
gradient) are kept, and at each backward pass after that the step before it is counted
as an optimizer's would be (`params` facts after steps 1, 2, 4, 8..., --check-steps, the
window). An optimizer seen at the second backward pass (gradients accumulated over
several passes before its first step) leaves the counting to its own hook.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import torch

from distrun.check.probe_params import record_named
from distrun.check.probe_state import Optimizer, State

HAND = -1  # the key of the hand-made updates in State.optimizers (an optimizer's is id())
_GRAPH_LIMIT = 1_000_000  # nodes visited at most to find the leaves


def hand_step(state: State, tensors: object,
              stepped: Callable[[State, Optimizer, Callable[[], None]], None]) -> bool:
    """Called at each backward pass after the first, before it runs; False: stop
    watching backward passes (an optimizer counts the steps, or the window is over)."""
    if state.closing or state.ended or any(key != HAND for key in state.optimizers):
        return False
    entry = state.optimizers.get(HAND)
    if entry is None:
        params = None if _optimizer_made() else _leaves(tensors)
        if not params:
            return False
        entry = state.optimizers[HAND] = Optimizer(0)
        entry.params = params
        state.fact("backward", hand=True)
    params = entry.params or []
    stepped(state, entry, lambda: record_named(state, entry, params))
    return not state.closing


def _optimizer_made() -> bool:
    """Is there an optimizer among the live objects (looked at once)?"""
    optimizer = torch.optim.Optimizer  # type(), not isinstance: no __class__ is asked for
    return any(issubclass(type(obj), optimizer) for obj in gc.get_objects())


def _leaves(tensors: object) -> list[torch.Tensor]:
    """The tensors requiring a gradient that the graph of `tensors` accumulates into, in
    the order first reached."""
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(
        tensors) if isinstance(tensors, (list, tuple)) else []
    todo: list[Any] = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn]
    seen: set[int] = set()
    found: dict[int, torch.Tensor] = {}
    while todo and len(seen) < _GRAPH_LIMIT:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.setdefault(id(variable), variable)
        todo.extend(child for child, _ in reversed(node.next_functions))
    return list(found.values())


def last_hand_step(state: State) -> None:
    """At the rank's end: the update after the last backward pass is a step too."""
    entry = state.optimizers.get(HAND)
    if entry is not None and not state.closing:
        entry.steps += 1
        record_named(state, entry, entry.params or [])
