"""What every transform works on, and what a transform is.

A `Context` holds the script's facts (read-only), the edit plan, the names the
converted script introduces, the options, and the results transforms hand to later
ones: each handed-over result is a typed field below, written by one transform and
read by those after it in the pipeline's order.

A `Transform` is a name, the condition under which it runs (from the options), and a
function of the context. `transforms.PIPELINE` lists them in the order they run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.analysis import Facts
from distrun.convert.edits import Plan
from distrun.convert.names import Names
from distrun.convert.options import ConvertOptions
from distrun.convert.wrapped import WrappedModel, reference_ids


@dataclass(frozen=True)
class LoaderToPrepare:
    """accelerate: a training DataLoader that `accelerator.prepare` must take."""

    call: cst.Call  # the DataLoader(...) call
    name: str | None  # what it is assigned to, if a plain target
    why: str  # why it counts as a training loader


@dataclass(frozen=True)
class EvalLoader:
    """--eval shard: an evaluation DataLoader and the names it goes by."""

    call: cst.Call
    names: frozenset[str]


@dataclass
class Context:
    facts: Facts
    plan: Plan
    names: Names
    options: ConvertOptions
    imports: set[str] = field(default_factory=set)  # keys of imports.IMPORTS to add
    # -- handed from one transform to later ones --------------------------------------
    models: list[WrappedModel] = field(default_factory=list)  # model -> amp, eval, saves
    loaders_to_prepare: list[LoaderToPrepare] = field(default_factory=list)  # data -> model
    eval_loaders: list[EvalLoader] = field(default_factory=list)  # data -> evaluation
    setup_lines: list[str] = field(default_factory=list)  # any -> setup: code it appends
    _model_refs: set[int] | None = field(default=None, repr=False)

    @property
    def accelerate(self) -> bool:
        return self.options.target == "accelerate"

    def need(self, *keys: str) -> None:
        """The converted script needs these imports (keys of `imports.IMPORTS`)."""
        self.imports.update(keys)

    def model_refs(self) -> set[int]:
        """ids of every expression denoting a wrapped model (after the model transform)."""
        if self._model_refs is None:
            self._model_refs = reference_ids(self.facts, self.models)
        return self._model_refs

    def unwrap(self, code: str) -> str:
        """The model inside the wrapper the target puts around it."""
        if self.accelerate:
            return f"{self.names.accelerator}.unwrap_model({code})"
        return f"{code}.module"

    def barrier(self) -> str:
        if self.accelerate:
            return f"{self.names.accelerator}.wait_for_everyone()"
        self.need("dist")
        return f"{self.names.dist}.barrier()"


def always(_options: ConvertOptions) -> bool:
    return True


@dataclass(frozen=True)
class Transform:
    """One rewrite of the pipeline: `run(ctx)` records edits when `applies(options)`."""

    name: str
    run: Callable[[Context], None]
    applies: Callable[[ConvertOptions], bool] = always
