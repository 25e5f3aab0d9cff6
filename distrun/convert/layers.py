"""What builds a model, as far as the script shows: the layers and classes it is made of
(for `--sync-bn`: has it BatchNorm layers? for `--shard`: is the class named one of them?).

Followed: torch.nn layers and containers, the project's own classes (their bases, and
every call in them) and functions, DataParallel wraps. Not seen: a model from
torchvision, timm, torch.hub or a file, a base class from elsewhere; then `unseen`, and
what the model holds cannot be told (a BatchNorm in a torchvision ResNet).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import statement
from distrun.convert.context import Context
from distrun.convert.idioms import DATA_PARALLEL
from distrun.convert.models import Model

_BN = re.compile(r"^(Lazy)?(Sync)?BatchNorm([123]d)?$")
SYNC = frozenset({"torch.nn.SyncBatchNorm", "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
                  "torch.nn.modules.batchnorm.SyncBatchNorm",
                  "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm",
                  "apex.parallel.convert_syncbn_model", "apex.parallel.SyncBatchNorm"})
_SAME = ("to", "cuda", "cpu", "float", "double", "train")  # calls that give the model back
_OPAQUE = ("torch.hub.", "torch.load", "torch.jit.", "torch.export.")
MODULE_CLASSES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


def sync_batchnorm(ctx: Context) -> cst.Call | None:
    """The script's own SyncBatchNorm (a conversion or a layer), if it has one."""
    return next((c for c in ctx.facts.calls if ctx.facts.call_name(c) in SYNC), None)


@dataclass
class Built:
    """The names of the layers and classes that build a model; `unseen`: not all is
    in the script."""

    names: set[str] = field(default_factory=set)
    unseen: bool = False


def built_from(ctx: Context, model: Model) -> Built:
    facts, flow = ctx.facts, ctx.flow
    component = flow.component(model.place)
    built, seen = Built(), set[int]()
    values = 0
    for place in component:
        for target in flow.bindings(place):
            if flow.placeholder(target):
                continue
            assign = facts.parent.get(facts.parent.get(target, target))
            if not isinstance(assign, (cst.Assign, cst.AnnAssign)) or assign.value is None:
                built.unseen = True  # a loop variable, a `with ... as`, an unpacked tuple
                continue
            value = _strip_moves(assign.value)
            if isinstance(value, (cst.Name, cst.Attribute)) and flow.place_of(value) in component:
                continue  # another name of the same model
            values += 1
            _builds(ctx, value, built, seen)
    built.unseen = built.unseen or not values
    return built


def has_batchnorm(ctx: Context, model: Model) -> bool | None:
    """True, False, or None when it cannot be told (see the module's docstring)."""
    built = built_from(ctx, model)
    if any(_BN.match(name) for name in built.names):
        return True
    return None if built.unseen else False


def _strip_moves(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in _SAME:
        expr = expr.func.value
    return expr


def _builds(ctx: Context, expr: cst.BaseExpression, built: Built, seen: set[int]) -> None:
    """What the expression that builds a model (or a part of it) is made of."""
    facts = ctx.facts
    if not isinstance(expr, cst.Call):
        built.unseen = True
        return
    name = facts.call_name(expr) or ""
    built.names.add(name.rsplit(".", 1)[-1])
    defined = facts.local_definition(expr)
    if name in DATA_PARALLEL and expr.args:
        _builds(ctx, _strip_moves(expr.args[0].value), built, seen)
    elif defined is not None:
        _scope(ctx, defined, built, seen)
    elif name.startswith("torch.nn.") and not name.startswith(_OPAQUE):
        for arg in expr.args:
            if isinstance(_strip_moves(arg.value), cst.Call):
                _builds(ctx, _strip_moves(arg.value), built, seen)
    else:
        built.unseen = True


def _scope(ctx: Context, node: cst.FunctionDef | cst.ClassDef, built: Built,
           seen: set[int]) -> None:
    """A class or function of the project, and what it builds in turn."""
    facts = ctx.facts
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, cst.ClassDef):
        built.names.add(node.name.value)
        for base in node.bases:
            qualified = facts.qualname(base.value) or ""
            parent = next((c for c in facts.classes() if c.name.value == qualified.rsplit(
                ".", 1)[-1]), None)
            if parent is not None:
                _scope(ctx, parent, built, seen)
            elif qualified not in MODULE_CLASSES:
                built.unseen = True  # built on a class from elsewhere
    for call in facts.calls_in(node):
        name = facts.call_name(call) or ""
        built.names.add(name.rsplit(".", 1)[-1])
        defined = facts.local_definition(call)
        if defined is not None:
            _scope(ctx, defined, built, seen)
        elif name.startswith(_OPAQUE) or not _plain(ctx, call):
            built.unseen = True


def _plain(ctx: Context, call: cst.Call) -> bool:
    """A call that builds no module from elsewhere: torch, the standard library, a
    builtin, a method of a local object, the project's own modules."""
    code = dotted(call.func)
    if code is None:
        return isinstance(call.func, cst.Attribute)  # `x.view(...)`, `f(a)(b)`
    info = ctx.facts.module_of(call)
    head = code.split(".", 1)[0]
    if head not in info.imports:
        return True  # a builtin, a local name or object
    root = info.imports[head].split(".", 1)[0]
    return root == "torch" or root in sys.stdlib_module_names or root in {
        m.name.split(".", 1)[0] for m in ctx.facts.modules}


def plan_sync_bn(ctx: Context) -> None:
    """--sync-bn: which models get SyncBatchNorm (`Model.sync_bn`); refused when none
    has a BatchNorm layer to convert."""
    already = sync_batchnorm(ctx)
    if already is not None:
        ctx.plan.finding(already, "model.sync_bn_already", "--sync-bn: the script already "
                         f"uses SyncBatchNorm (`{ctx.facts.code(already.func)}`): no second "
                         "conversion added", severity="info")
        return
    trained = [m for m in ctx.models if m.forwards]
    verdicts = [(m, has_batchnorm(ctx, m)) for m in trained]
    for model, verdict in verdicts:
        if verdict is not False:
            model.sync_bn = "found" if verdict else "unseen"
    if verdicts and all(v is False for _, v in verdicts):
        names = ", ".join(f"`{m.place.code}`" for m in trained)
        ctx.refuse(trained[0].optimizer, "model.sync_bn_nothing",
                   f"--sync-bn: {names} has no BatchNorm layer (every layer and class it is "
                   "built from is in the script): there is nothing to synchronise",
                   "leave --sync-bn out")
        return
    for model, verdict in verdicts:
        if verdict is False:
            ctx.plan.finding(model.optimizer, "model.sync_bn_nothing", f"--sync-bn: "
                             f"`{model.place.code}` has no BatchNorm layer: left as it is",
                             severity="info")


def sync_bn_lines(ctx: Context, model: Model, name: str, anchor: cst.CSTNode
                  ) -> list[cst.BaseStatement]:
    """--sync-bn: the statement that makes `name`'s BatchNorm layers SyncBatchNorm (before
    its wrap or its sharding), when the model has (or may have) some."""
    if not model.sync_bn:
        return []
    plan = ctx.plan
    if ctx.on_cpu:
        plan.finding(anchor, "model.sync_bn", f"--sync-bn: `{name}` is left as it is: the "
                     "script trains on the CPU, where SyncBatchNorm does not run (each rank "
                     "keeps its own BatchNorm statistics)", severity="warning")
        return []
    unseen = " (if it has any: what builds it is not all in the script)" \
        if model.sync_bn == "unseen" else ""
    plan.change(anchor, "model.sync_bn", f"BatchNorm layers of `{name}`{unseen} -> SyncBatchNorm "
                "when CUDA is available")
    plan.finding(anchor, "model.sync_bn", "SyncBatchNorm is used only with CUDA: on CPU each "
                 "rank keeps its own BatchNorm statistics", severity="info")
    return [statement(f"if torch.cuda.is_available():  # SyncBatchNorm runs on GPU only\n"
                      f"    {name} = torch.nn.SyncBatchNorm.convert_sync_batchnorm({name})\n")]
