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

from distrun.convert.analysis import Facts, ModuleInfo
from distrun.convert.edits import Plan
from distrun.convert.flow import Flow
from distrun.convert.models import Model
from distrun.convert.names import Names
from distrun.convert.options import ConvertOptions
from distrun.convert.report import Finding


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
    imports: dict[str, set[str]] = field(default_factory=dict)  # module -> IMPORTS keys
    # -- handed from one transform to later ones --------------------------------------
    models: list[Model] = field(default_factory=list)  # model -> amp, accumulation
    ddp_calls: dict[int, str] = field(default_factory=dict)  # id(forward call) -> its DDP
    ddp_arguments: set[int] = field(default_factory=set)  # ids of Args passing a DDP object
    ddp_params: set[tuple[int, str]] = field(default_factory=set)  # (id(function), param)
    prepared: set[int] = field(default_factory=set)  # accelerate: optimizers prepared
    helpers: set[tuple[str, str]] = field(default_factory=set)  # (helper, module) it is in
    entry_is_library: bool = False  # setup -> pipeline: the entry only defines things

    def helper_lines(self, info: ModuleInfo) -> str:
        """The definitions of the helpers (`rank0_value`, `shard_loader`) `info` uses."""
        from distrun.convert.transforms import agree, rebuild

        code = {"rank0_value": agree.helper_code, "shard_loader": rebuild.helper_code}
        return "".join(code[h](self) for h, m in sorted(self.helpers) if m == info.name)
    loaders_to_prepare: list[LoaderToPrepare] = field(default_factory=list)  # data -> model
    eval_loaders: list[EvalLoader] = field(default_factory=list)  # data -> evaluation
    setup_lines: list[str] = field(default_factory=list)  # any -> setup: code it appends
    train_loaders: list[cst.Call] = field(default_factory=list)  # data -> deepspeed
    files: dict[str, str] = field(default_factory=dict)  # written beside the output
    refusal: tuple[Finding, ModuleInfo] | None = None  # why nothing may be converted
    _flow: Flow | None = field(default=None, repr=False)

    @property
    def accelerate(self) -> bool:
        return self.options.target == "accelerate"

    @property
    def deepspeed(self) -> bool:
        return self.options.target == "deepspeed"

    @property
    def fsdp(self) -> bool:
        return self.options.target == "fsdp"

    def refuse(self, node: cst.CSTNode | None, message: str, fix: str) -> None:
        """Convert nothing: what is at `node` cannot be converted safely (the first
        reason found is kept)."""
        if self.refusal is None:
            where = self.facts.module_of(node) if node is not None else self.facts.entry
            line = self.facts.line(node) if node is not None else 1
            self.refusal = (Finding(line, self.options.target, "error", message, fix),
                            where)

    def need(self, *keys: str, at: cst.CSTNode | None = None) -> None:
        """The module of `at` (default: the entry script) needs these imports (keys of
        `imports.IMPORTS`)."""
        info = self.facts.module_of(at) if at is not None else self.facts.entry
        self.imports.setdefault(info.name, set()).update(keys)

    def imports_for(self, info: ModuleInfo) -> set[str]:
        return self.imports.get(info.name, set())

    @property
    def flow(self) -> Flow:
        """Where objects go in the project (built once, on first use)."""
        if self._flow is None:
            self._flow = Flow(self.facts)
        return self._flow

    def model_calls(self) -> set[int]:
        """ids of the callee expressions of every forward call of a model (training or
        not), after the model transform."""
        return {id(c.func) for m in self.models for c in [*m.forwards, *m.other_calls]}

    def unwrap(self, code: str) -> str:
        """The model inside the wrapper the target puts around it."""
        if self.accelerate:
            return f"{self.names.accelerator}.unwrap_model({code})"
        return f"{code}.module"

    def barrier(self, at: cst.CSTNode | None = None) -> str:
        """Code that waits for every rank (in the module of `at`)."""
        if self.accelerate:
            return f"{self.names.accelerator}.wait_for_everyone()"
        self.need("dist", at=at)
        return f"{self.names.dist}.barrier()"


def always(_options: ConvertOptions) -> bool:
    return True


@dataclass(frozen=True)
class Transform:
    """One rewrite of the pipeline: `run(ctx)` records edits when `applies(options)`."""

    name: str
    run: Callable[[Context], None]
    applies: Callable[[ConvertOptions], bool] = always
