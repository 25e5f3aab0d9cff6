"""What every transform works on, and what a transform is.

A `Context` holds the script's facts (read-only), the edit plan, the names the
converted script introduces, the options, the target (`convert.targets`: the
vocabulary of DDP, accelerate, DeepSpeed or FSDP2 that transforms ask for instead of
branching on the target), and the results transforms hand to later ones: each
handed-over result is a typed field below, keyed by what it is about (a model's own
results live on its `Model`), written by one transform and read by those after it in
the pipeline's order.

A `Transform` is a name, the condition under which it runs, and a function of the
context. `transforms.PIPELINE` lists them in the order they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import libcst as cst

from distrun.convert.analysis import Facts, ModuleInfo
from distrun.convert.edits import Plan
from distrun.convert.models import Home, Model
from distrun.convert.names import Names
from distrun.convert.object_flow import Flow
from distrun.convert.options import ConvertOptions
from distrun.convert.options import Target as TargetName
from distrun.convert.report import Finding
from distrun.convert.rules import check


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
    target: Target
    imports: dict[str, set[str]] = field(default_factory=dict)  # module -> IMPORTS keys
    # -- handed from one transform to later ones --------------------------------------
    models: list[Model] = field(default_factory=list)  # model -> every later transform
    # helper definitions a module needs: module name -> {helper name: its code}
    helpers: dict[str, dict[str, str]] = field(default_factory=dict)
    eval_loaders: list[EvalLoader] = field(default_factory=list)  # data -> evaluation
    setup_lines: list[str] = field(default_factory=list)  # any -> setup: code it appends
    train_loaders: list[cst.Call] = field(default_factory=list)  # data -> deepspeed
    hand_shared: bool = False  # data -> loss: batches made by hand shared out among ranks
    files: dict[str, str] = field(default_factory=dict)  # written beside the output
    file_bases: dict[str, str] = field(default_factory=dict)  # file -> the user's it merges
    folder: str | None = None  # where the entry lives: the user's files beside it (None: none)
    refusal: tuple[Finding, ModuleInfo] | None = None  # why nothing may be converted
    entry_is_library: bool = False  # setup -> pipeline: the entry only defines things
    on_cpu: bool = False  # device -> setup, wrap: the script names no GPU (trains on the CPU)
    first_runs: set[cst.CSTNode] = field(default_factory=set)  # `if`s rank 0 runs first
    # data -> batches -> hazards: DataLoaders over an IterableDataset (-> its class), and
    # those whose training loops now take their batches through rank_batches
    stream_loaders: dict[cst.Call, cst.ClassDef] = field(default_factory=dict)
    streams_shared: set[cst.Call] = field(default_factory=set)
    _flow: Flow | None = field(default=None, repr=False)

    def refuse(self, node: cst.CSTNode | None, rule: str, message: str, fix: str) -> None:
        """Convert nothing: what is at `node` cannot be converted safely (the first
        reason found is kept; `rule`: its registered id)."""
        if self.refusal is None:
            where = self.facts.module_of(node) if node is not None else self.facts.entry
            line = self.facts.line(node) if node is not None else 1
            self.refusal = (Finding(line, check(rule), "error", message, fix), where)

    def need(self, *keys: str, at: cst.CSTNode | None = None) -> None:
        """The module of `at` (default: the entry script) needs these imports (keys of
        `imports.IMPORTS`)."""
        info = self.facts.module_of(at) if at is not None else self.facts.entry
        self.imports.setdefault(info.name, set()).update(keys)

    def imports_for(self, info: ModuleInfo) -> set[str]:
        return self.imports.get(info.name, set())

    def define_helper(self, name: str, at: cst.CSTNode, code: str) -> None:
        """The module of `at` defines the helper `name` (`code`: its definition), once."""
        self.helpers.setdefault(self.facts.module_of(at).name, {})[name] = code

    def helper_lines(self, info: ModuleInfo) -> str:
        """The definitions of the helpers `info` uses, in the order of their names."""
        defined = self.helpers.get(info.name, {})
        return "".join(defined[name] for name in sorted(defined))

    @property
    def flow(self) -> Flow:
        """Where objects go in the project (built once, on first use)."""
        if self._flow is None:
            self._flow = Flow(self.facts)
        return self._flow

    def calls_of(self, func: cst.FunctionDef) -> list[tuple[cst.Call, bool]]:
        """Every call of `func` (and whether it is called as a method); for a `forward`
        or `__call__`, also the calls of the objects of its class (`criterion(x, y)`,
        `loss_compute(out, y, norm)`)."""
        flow, facts = self.flow, self.facts
        sites = list(flow.call_sites(func))
        block = facts.parent.get(func)
        if not isinstance(facts.parent.get(block) if block is not None else None,
                          cst.ClassDef) or func.name.value not in ("forward", "__call__"):
            return sites
        for call in facts.calls:
            if isinstance(call.func, (cst.Name, cst.Attribute)):
                place = flow.place_of(call.func)
                if place is not None and any(flow.method(c, func.name.value) is func
                                             for c in flow.instances(place)):
                    sites.append((call, True))
        return sites

    # -- what the model transform made of the models --------------------------------

    def model_calls(self) -> set[cst.BaseExpression]:
        """The callee expressions of every forward call of a model (training or not),
        after the model transform."""
        return {c.func for m in self.models for c in [*m.forwards, *m.other_calls]}

    def wrapper_called(self, call: cst.Call) -> str | None:
        """What the forward call `call` now calls (the DDP object, the engine, the sharded
        model), if the model transform made it go through the target's wrapper."""
        return next((m.wrapped.calls[call] for m in self.models if call in m.wrapped.calls),
                    None)

    def holds_wrapper(self, function: cst.FunctionDef, name: str) -> bool:
        """Does the parameter `name` of `function` receive the wrapper from its callers?"""
        return any((function, name) in m.wrapped.parameters for m in self.models)

    def hands_wrapper_on(self, arg: cst.CSTNode) -> bool:
        """Does the argument `arg` pass the wrapper to a function that trains with it?"""
        return any(arg in m.wrapped.handed_on for m in self.models)


def always(_ctx: Context) -> bool:
    return True


@dataclass(frozen=True)
class Transform:
    """One rewrite of the pipeline: `run(ctx)` records edits when `applies(ctx)`."""

    name: str
    run: Callable[[Context], None]
    applies: Callable[[Context], bool] = always


# Where a target's own transforms run in the pipeline (see transforms.PIPELINE).
Stage = Literal["prepared", "engine", "late"]


@dataclass(frozen=True)
class WrapSite:
    """Where the model transform makes the wrapper of one model."""

    model: Model
    home: Home
    wrapper: str  # the wrapper as code where it is made (`ddp_model`, `self.model_engine`)
    model_code: str  # the model as code there (`model`, `self.model`)
    anchor: cst.CSTNode  # the statement it goes before (or after, with `after`)
    after: bool
    moved: bool  # the script moves the model to a device itself


@dataclass(frozen=True)
class Wrapping:
    """The statement that makes the wrapper, and where it goes (a target may move it
    after the optimizer is built)."""

    statement: cst.BaseStatement
    anchor: cst.CSTNode
    after: bool
    before: tuple[cst.BaseStatement, ...] = ()  # what runs just before it (made there too)


@dataclass(frozen=True)
class Setup:
    """The code that starts the distributed run at the top of the script, and ends it."""

    module_level: str  # this process's place, cheap at import ("": not separable)
    start: str  # what starts the processes' group (with `module_level` when that is "")
    comment: str  # the comment above the set-up
    start_comment: str  # above `start` when `module_level` went to the module's top
    imports: tuple[str, ...]  # keys of imports.IMPORTS
    teardown: str  # at the end of the run
    message: str  # the report's change, with {where}


class Target(Protocol):
    """The vocabulary of one target: what transforms ask instead of branching on the
    target (implementations: `convert.targets`)."""

    name: TargetName
    wrapper: str  # what the report calls the wrapped model
    wrap_call: str  # what the report calls the step that wraps (or shards) it
    launcher: str  # the `distrun launch --launcher` that runs the converted script
    wraps_model: bool  # False: the model is changed in place (FSDP2), no wrapper object
    adds_autocast: bool  # --amp fp16/bf16 becomes autocast code (not the target's setting)
    loaders_count_epochs: bool  # its sharded loaders reshuffle each pass by themselves

    def check_options(self, options: ConvertOptions, given: Mapping[str, Any]) -> None:
        """Raise ValueError for an option (or a combination) this target cannot honour."""

    def transforms(self, stage: Stage) -> tuple[Transform, ...]:
        """The target's own rewrites that run at `stage` of the pipeline."""

    def precision_owner(self, options: ConvertOptions) -> str | None:
        """Why mixed precision written as code must go (the target sets it), or None."""

    def wrapped_name(self, model_name: str) -> str:
        """The name the wrapper of a model called `model_name` is given."""

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping | None:
        """The statement that makes the model's wrapper at `site`; None if refused."""

    def unwrap(self, ctx: Context, code: str) -> str:
        """The model inside the wrapper written `code`."""

    def barrier(self, ctx: Context, at: cst.CSTNode | None = None) -> str:
        """Code that waits for every rank (in the module of `at`)."""

    def all_reduce_sum(self, ctx: Context, holder: str, at: cst.CSTNode) -> str:
        """A line after which the tensor `holder` holds the sum over the ranks."""

    def gather_objects(self, ctx: Context, holder: str, value: str, at: cst.CSTNode) -> str:
        """Lines after which `holder` is the list of every rank's `value`, by rank."""

    def no_sync(self, ctx: Context, wrapper: str) -> str:
        """The context manager that skips the gradient all-reduce of `wrapper`."""

    def set_epoch(self, loader: str, epoch: str) -> str:
        """The call that reshuffles the sharded `loader` for `epoch`."""

    def take_loader(self, ctx: Context, call: cst.Call, why: str) -> bool:
        """Shard the training DataLoader `call` the target's own way; False: with a
        DistributedSampler, as the data transform does."""

    def prepare_loader(self, ctx: Context, name: str) -> str | None:
        """The expression that makes the loader `name` again, sharded, the target's own
        way; None: rebuilt with a DistributedSampler, as the data transform does."""

    def main_process_first(self, ctx: Context) -> str | None:
        """A context manager in which rank 0 runs first, if the target has one."""

    def setup(self, ctx: Context) -> Setup:
        """The script's set-up and tear-down."""

    def module_lines(self, ctx: Context, used: set[str]) -> tuple[str, set[str]]:
        """What another module of the project needs, given the names its converted code
        uses: definitions, and import keys."""
