"""The model's state under the targets that shard it (`--to fsdp`, `--to deepspeed --zero 3`):
where a script reads it or saves the module whole, by whatever way it reaches the model.

Each rank holds a shard of every weight: reading the model's state is a collective (it
gathers the shards), and the sharded module itself does not pickle. For both targets
this module finds:

  - the model behind an expression: a name the flow joins with it, `model.module` (the
    model inside a removed DataParallel), `getattr(model, "module", model)`,
    `model.module if ... else model`, `model.to(...)`, `self` in a method of its class;
  - `X.state_dict()` calls on it, wherever they are (a dict, a deepcopy, a
    comprehension, a helper function): each target makes them the full state;
  - the module saved whole (`torch.save(model, p)`, the model inside the saved dict or
    list): saved as a plain module of the script's own class. Before sharding,
    `keep_plain_copy(model)` keeps a weightless copy of it on it (its class, structure
    and attributes; parameters on the meta device, no memory); at the save,
    `plain_module(model, full_state)` fills a copy of that with the full weights (on the
    CPU) and the module's current modes and attributes: what the original pickled;
  - the calls of the script's own functions inside a saved object that read the state
    or run the model (a few calls deep): the save runs on rank 0 only, and these are
    collectives, so they are computed on every rank just before it (`Plan.hoist`).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import positional
from distrun.convert.build import statement
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.models import Model
from distrun.convert.names import Names
from distrun.convert.object_flow import Place
from distrun.convert.syntax import string_value
from distrun.convert.transforms.checkpoint import file_opened_around

MAX_DEPTH = 4  # calls of the script's functions followed from a saved object
_DEFERRED = (cst.Lambda, cst.IfExp, cst.BooleanOperation)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_OWN = frozenset({"__init__", "state_dict", "load_state_dict", "_save_to_state_dict",
                  "_load_from_state_dict"})


def model_behind(ctx: Context, model: Model, expr: cst.BaseExpression, methods: bool = True
                 ) -> cst.BaseExpression | None:
    """The expression reading `model` that `expr` reaches it through (`model` in
    `model.module`), or None when `expr` is not the model; with `methods`, also `self` in
    a method of the model's class (`def save(self, path)`)."""
    flow = ctx.flow
    expr = flow.strip(expr)
    if isinstance(expr, cst.IfExp):
        body = model_behind(ctx, model, expr.body, methods)
        return model_behind(ctx, model, expr.orelse, methods) if body is not None else None
    if isinstance(expr, cst.Call):
        args = positional(expr)
        if ctx.facts.call_name(expr) != "getattr" or len(args) not in (2, 3) or \
                string_value(args[1].value) != "module":
            return None
        inner = model_behind(ctx, model, args[0].value, methods)
        return inner if len(args) == 2 or model_behind(
            ctx, model, args[2].value, methods) is not None else None
    if isinstance(expr, cst.Attribute) and expr.attr.value == "module":
        inner = model_behind(ctx, model, expr.value, methods)
        if inner is not None:
            return inner
    place = flow.place_of(expr)
    if place is None:
        return None
    if flow.same(place, model.place) or methods and _in_own_method(ctx, model, expr, place):
        return expr
    return None


def _in_own_method(ctx: Context, model: Model, expr: cst.BaseExpression, place: Place
                   ) -> bool:
    """Is `expr` `self` in a method of the model's class (not its constructor, nor its
    own `state_dict` / `load_state_dict`, which the targets' gathering calls)?"""
    func = ctx.facts.function(expr)
    return place.code == "self" and func is not None and func.name.value not in _OWN and \
        any(ctx.flow.family(c) is place.scope for c in ctx.flow.instances(model.place))


def is_state_read(ctx: Context, model: Model, call: cst.Call) -> bool:
    """`X.state_dict()` with X the model."""
    return method_name(call) == "state_dict" and isinstance(call.func, cst.Attribute) \
        and not call.args and model_behind(ctx, model, call.func.value) is not None


def saves(ctx: Context) -> list[cst.Call]:
    return [c for c in ctx.facts.calls
            if ctx.facts.call_name(c) == "torch.save" and positional(c)]


def save_statement(ctx: Context, save: cst.Call) -> cst.CSTNode | None:
    """The statement the checkpoint transform runs on rank 0 only for `save`: its line, or
    the `with open(...)` block it is all of."""
    stmt = ctx.facts.statement(save)
    return (file_opened_around(ctx.facts, stmt) or stmt) if stmt is not None else None


def saved_whole(ctx: Context, model: Model, save: cst.Call) -> list[cst.BaseExpression]:
    """The expressions of the object `save` saves that are the model itself: the object,
    a value of a dict, an element of a list or tuple in it."""
    found: list[cst.BaseExpression] = []
    todo: list[cst.BaseExpression] = [positional(save)[0].value]
    while todo:
        expr = todo.pop()
        if isinstance(expr, cst.Dict):
            todo += [e.value for e in expr.elements if isinstance(e, cst.DictElement)]
        elif isinstance(expr, (cst.List, cst.Tuple)):
            todo += [e.value for e in expr.elements]
        elif isinstance(expr, cst.Call) and ctx.facts.call_name(expr) == "dict":
            todo += [a.value for a in expr.args if a.keyword is not None]
        elif model_behind(ctx, model, expr) is not None:
            found.append(expr)
    return found


def held_whole(ctx: Context, model: Model, save: cst.Call) -> cst.BaseExpression | None:
    """A dict, list or tuple built elsewhere, holding the model, that `save` saves by its
    name (`ckpt = {"model": model}` ... `torch.save(ckpt, p)`)."""
    flow, saved = ctx.flow, positional(save)[0].value
    place = flow.place_of(saved) if isinstance(saved, (cst.Name, cst.Attribute)) else None
    for target in flow.bindings(place) if place is not None else ():
        assign = ctx.facts.parent.get(ctx.facts.parent.get(target, target))
        value = assign.value if isinstance(assign, cst.Assign) else None
        if isinstance(value, (cst.Dict, cst.List, cst.Tuple)) and any(
                model_behind(ctx, model, e.value) is not None for e in value.elements):
            return value
    return None


def reaching_calls(ctx: Context, model: Model, save: cst.Call) -> list[cst.Call] | None:
    """The calls of the script's functions in what `save` saves that read the model's
    state or run the model, a few calls deep (the outermost ones); None when one of them
    may not run at all (in a lambda, `a if c else b`, a comprehension's body): it cannot
    be computed before the save."""
    facts, flow = ctx.facts, ctx.flow
    reaching = _reaching_functions(ctx, model)
    saved = positional(save)[0].value
    found = [c for c in facts.calls_in(saved)
             if (callee := flow.callee(c)) is not None and id(callee[0]) in reaching]
    outer = [c for c in found if not any(o is not c and facts.inside(c, o) for o in found)]
    return outer if all(_runs_first(ctx, call, saved) for call in outer) else None


def _runs_first(ctx: Context, call: cst.Call, saved: cst.CSTNode) -> bool:
    """Does `call` run whenever `saved` is computed, before it is (not in a lambda,
    `a if c else b`, `x and f()`, nor a comprehension's body: only in its first
    iterable)?"""
    child: cst.CSTNode = call
    for node in ctx.facts.ancestors(call):
        if child is saved:
            return True
        if isinstance(node, _DEFERRED) or isinstance(node, cst.CompFor) and \
                child is not node.iter or isinstance(node, _COMPREHENSIONS) and \
                child is not node.for_in:
            return False
        child = node
    return child is saved


def _reaching_functions(ctx: Context, model: Model) -> set[int]:
    """ids of the functions that read the model's state or run it, and of those calling
    them, up to MAX_DEPTH calls away."""
    facts, flow = ctx.facts, ctx.flow
    sites: list[cst.CSTNode] = [*model.forwards, *model.other_calls,
                                *(c for c in facts.calls if is_state_read(ctx, model, c))]
    found: set[int] = set()
    todo = [f for s in sites if (f := facts.function(s)) is not None]
    for _ in range(MAX_DEPTH):
        callers = []
        for func in todo:
            if id(func) not in found:
                found.add(id(func))
                callers += [f for site, _ in flow.call_sites(func)
                            if (f := facts.function(site)) is not None]
        todo = callers
    return found


@dataclass(frozen=True)
class SaveWords:
    """How a target names what a save of its sharded model meets (rule ids, wording)."""

    whole_rule: str  # the whole model held in an object saved later: refused
    every_rank_rule: str  # a state read in a function the save calls: hoisted or refused
    pickles: tuple[str, str]  # the model's name there, what pickling it would write
    gathers: tuple[str, str]  # what a read gathers, what reading the state does


def prepare_save(ctx: Context, model: Model, save: cst.Call, words: SaveWords
                 ) -> tuple[cst.CSTNode, list[cst.BaseExpression]] | None:
    """For `save` (a `torch.save` that may reach the sharded model): refuse what cannot
    be saved safely, compute the state reads of the script's functions on every rank
    just before it; the save's statement and the model objects it saves whole (None
    when refused)."""
    facts, plan = ctx.facts, ctx.plan
    stmt = save_statement(ctx, save)
    calls = reaching_calls(ctx, model, save)
    held = held_whole(ctx, model, save)
    if held is not None:
        ctx.refuse(held, words.whole_rule, f"the whole {words.pickles[0]} is put in an "
                   f"object saved later (line {facts.line(save)}): {words.pickles[1]}",
                   "build the object in the save's own line (`torch.save({'model': model, "
                   "...}, path)`): distrun then saves a plain module with the full weights")
        return None
    if stmt is None or calls is None:
        ctx.refuse(save, words.every_rank_rule, f"`{facts.code(save)}` reads the model's "
                   "state in a function called where it may not run (a lambda, `a if c "
                   "else b`): the save runs on rank 0 only, and gathering "
                   f"{words.gathers[0]} needs every rank", "compute the object to save on "
                   "the line before `torch.save`")
        return None
    for call in calls:
        plan.hoist(call, stmt, hoist_name(ctx, call), "every rank: it gathers the sharded "
                   "weights")
        plan.change(call, words.every_rank_rule, f"`{facts.code(call.func)}(...)` reads "
                    f"{words.gathers[1]}: computed on every rank just before the save, which "
                    "rank 0 alone makes")
    return stmt, saved_whole(ctx, model, save)


def hoist_name(ctx: Context, call: cst.Call) -> str:
    """A name for what `call` returns: `checkpoint` for `get_checkpoint(...)`, else
    `<function>_value`."""
    func = call.func
    base = func.attr.value if isinstance(func, cst.Attribute) else ctx.facts.code(func)
    head, _, rest = base.strip("_").partition("_")
    return ctx.names.fresh(rest if head in ("get", "make", "build", "collect") and rest
                           else f"{base}_value")


def set_attributes(ctx: Context, model: Model) -> list[str]:
    """The attributes the script sets on the model itself (`model.epoch = ...`)."""
    names = []
    for assign in ctx.facts.assigns:
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else []
        for target in targets:
            if isinstance(target, cst.Attribute) and model_behind(
                    ctx, model, target.value) is not None:
                names.append(target.attr.value)
    return sorted(set(names) - {"module"})


def keep_plain_copy(ctx: Context, code: str, at: cst.CSTNode) -> cst.BaseStatement:
    """The statement that keeps the weightless copy of the model (written `code`), before
    `at` where it is sharded; `keep_plain_copy` defined in the module of `at`."""
    ctx.need("copy", "torch", at=at)
    ctx.define_helper(ctx.names.keep_plain_copy, at, keep_code(ctx.names))
    return statement(f"{ctx.names.keep_plain_copy}({code})  # its class and structure, no "
                     "weights: a save of the whole module fills a copy of it\n")


def plain_module(ctx: Context, model: Model, at: cst.CSTNode) -> tuple[str, str]:
    """`plain_module` (defined in the module of `at`), and the names of the attributes the
    script sets on the model, as the arguments that follow the state (`, "epoch"`)."""
    ctx.need("copy", "torch", at=at)
    ctx.define_helper(ctx.names.plain_module, at, plain_code(ctx.names))
    return ctx.names.plain_module, "".join(f', "{a}"' for a in set_attributes(ctx, model))


def keep_code(n: Names) -> str:
    return f'''

def {n.keep_plain_copy}(module):
    """distrun: before `module` is sharded, a copy of it kept on it (its class, structure
    and attributes; its parameters on the meta device, no memory), which
    `{n.plain_module}` fills when the module is saved whole."""
    vars(module).pop("_plain_copy", None)
    weightless = {{id(p): torch.nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
                  for p in module.parameters()}}
    vars(module)["_plain_copy"] = {n.copy}.deepcopy(module, weightless)
'''


def plain_code(n: Names) -> str:
    return f'''

def {n.plain_module}(module, state, *names):
    """distrun: what `torch.save(module, ...)` saves of a sharded module: its plain copy (the
    script's own class) holding the full weights `state` (rank 0's), on the CPU, with the
    module's modes and attributes, and `names` (attributes set on it later). Before the
    module is sharded: the module itself."""
    kept = vars(module).get("_plain_copy")
    if kept is None:
        return module
    plain = {n.copy}.deepcopy(kept)
    plain.load_state_dict({{k: v.detach().cpu() for k, v in state.items()}}, assign=True)
    for copied, live in zip(plain.modules(), module.modules()):
        vars(copied).update((k, v) for k, v in vars(live).items()
                            if k in vars(copied) and not k.startswith("_"))
    for name in names:
        value = getattr(module, name)
        if not isinstance(value, (torch.nn.Module, torch.Tensor)):
            setattr(plain, name, value)
    return plain.cpu()
'''
