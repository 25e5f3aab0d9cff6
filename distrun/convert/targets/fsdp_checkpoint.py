"""FSDP2 states and clipping for `--to fsdp`: what a sharded model saves, loads and returns.

A sharded model's `state_dict()` holds each rank's DTensor shards, which do not load into
the plain model; its optimizer's is keyed by those shards. Once the model is sharded:

    model.state_dict()          ->  get_model_state_dict(model, options=StateDictOptions(
                                        full_state_dict=True, cpu_offload=True))
    optimizer.state_dict()      ->  get_optimizer_state_dict(model, optimizer, options=...)

called on every rank (they gather the shards), the full state on rank 0 (the other ranks
get `{}`); inside a `torch.save(...)` (saved by rank 0 only) the state is computed just
before it, on every rank. Loads broadcast rank 0's state into every rank's shards:

    model.load_state_dict(S)    ->  set_model_state_dict(model, S if RANK == 0 else {},
                                        options=StateDictOptions(full_state_dict=True,
                                                                 broadcast_from_rank0=True))
    optimizer.load_state_dict(S) -> set_optimizer_state_dict(model, optimizer, ..., same)

The model is reached by any way the script has (`model.module` of a removed DataParallel,
`getattr(model, "module", model)`, a helper's parameter: see `full_state`), and its state
wherever it is read: saved directly or in a dict, deep-copied for a best model, a
comprehension over it. The whole module saved keeps saving a module:

    torch.save(model, p)        ->  model_state = get_model_state_dict(model, options=...)
                                    torch.save(plain_module(model, model_state), p)

the script's own class with the full weights, on the CPU (`keep_plain_copy(model)` keeps
its weightless copy before sharding). A function of the script called in a saved object
that reads the state (or runs the model) runs on every rank, just before the save (rank 0
alone would wait for the others in its gathering).

A state read or loaded before the model is sharded stays as it is. The optimizer's full
state is keyed by parameter name (torch.distributed.checkpoint's form); it resumes the
converted script, also from a checkpoint the original wrote.

`clip_grad_norm_` works on the shards as it is; its returned norm is a DTensor, made a
plain tensor (`.full_tensor()`) where the script uses it.

Won't (refused with the fix): a dict or list holding the whole model, built before the
line that saves it; a function reading the state called where it may not run (in a
lambda, a conditional expression).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import keyword, positional
from distrun.convert.build import code_of, expression, statement
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.models import Model, model_code_at
from distrun.convert.object_flow import Place
from distrun.convert.targets import full_state
from distrun.convert.targets.fsdp_memory import bound_value

_CLIP_NORM = frozenset({"torch.nn.utils.clip_grad_norm_",
                        "torch.nn.utils.clip_grad.clip_grad_norm_"})
FULL = "StateDictOptions(full_state_dict=True, cpu_offload=True)"


def keep_plain_copy(ctx: Context, model: Model, sharded_at: cst.BaseStatement,
                    code: str) -> None:
    """Before the model is sharded: its weightless copy, if a save of the whole module
    follows."""
    if any(full_state.saved_whole(ctx, model, save) for save in full_state.saves(ctx)
           if not _before(ctx, save, sharded_at)):
        ctx.plan.insert_before(sharded_at, [full_state.keep_plain_copy(ctx, code, sharded_at)])


def convert(ctx: Context, model: Model, sharded_at: cst.BaseStatement) -> None:
    facts = ctx.facts
    for call in facts.calls:
        if not isinstance(call.func, cst.Attribute) or _before(ctx, call, sharded_at):
            continue
        name, owner = method_name(call), _owner(ctx, model, call)
        if name == "state_dict" and not call.args and owner is not None:
            _get_state(ctx, model, call, owner)
        elif name == "load_state_dict" and owner is not None and positional(call):
            _set_state(ctx, model, call, owner)
        if ctx.refusal is not None:
            return
    for save in full_state.saves(ctx):
        if not _before(ctx, save, sharded_at):
            _save(ctx, model, save)
        if ctx.refusal is not None:
            return
    for call in facts.calls:
        if facts.call_name(call) in _CLIP_NORM and not isinstance(facts.parent.get(call), cst.Expr):
            ctx.plan.rewrite(call, lambda n: expression(f"{code_of(n)}.full_tensor()"))
            ctx.plan.change(call, "fsdp.clip_grad_norm",
                            f"`{facts.code(call.func)}(...)` returns a DTensor "
                            "for sharded gradients: `.full_tensor()` makes the norm a plain "
                            "tensor (the same on every rank)")


_WORDS = full_state.SaveWords(
    "fsdp.whole_model_save", "fsdp.state_every_rank",
    ("sharded model", "it would pickle this rank's shards and FSDP's class"),
    ("the state", "the model's full state (a gathering of every rank's shards)"))


def _save(ctx: Context, model: Model, save: cst.Call) -> None:
    """What `save` saves, computed where every rank gathers: the calls of the script's
    functions that read the state, the whole module as a plain one."""
    facts, plan = ctx.facts, ctx.plan
    prepared = full_state.prepare_save(ctx, model, save, _WORDS)
    if prepared is None or not prepared[1]:
        return
    stmt, whole = prepared
    found = full_state.model_behind(ctx, model, whole[0])
    assert found is not None
    state = ctx.names.fresh("model_state")
    helper, extra = full_state.plain_module(ctx, model, save)
    ctx.need("get_model_state_dict", "StateDictOptions", at=save)
    plan.insert_before(stmt, [statement(
        f"{state} = get_model_state_dict({facts.code(found)}, options={FULL})  # every "
        "rank: gathers the shards\n")])
    for expr in whole:
        plan.rewrite(expr, lambda e: expression(f"{helper}({code_of(e)}, {state}{extra})"))
    plan.change(save, "fsdp.plain_module", f"`{facts.code(save)}` saves the whole module: "
                f"`{helper}(...)`, a plain module of its own class (its copy kept "
                "before sharding) holding the full weights, on the CPU: it loads without "
                "FSDP, as the original's did")


def _before(ctx: Context, call: cst.Call, sharded_at: cst.BaseStatement) -> bool:
    """Does `call` run before the model is sharded (same block of code, earlier line)?"""
    facts = ctx.facts
    return facts.scope(call) is facts.scope(sharded_at) and \
        facts.module_of(call) is facts.module_of(sharded_at) and \
        facts.line(call) < facts.line(sharded_at)


def _owner(ctx: Context, model: Model, call: cst.Call) -> str | None:
    """"model" or "optimizer" when the receiver of `call` is the model (by any way the
    script reaches it) or its optimizer."""
    flow = ctx.flow
    target = call.func.value  # type: ignore[attr-defined]
    place = flow.place_of(flow.strip(target))
    if full_state.model_behind(ctx, model, target) is not None or (
            place is not None and _either_model(ctx, model, place)):
        return "model"
    built = ctx.facts.parent.get(model.optimizer)
    if place is not None and isinstance(built, cst.Assign) and len(built.targets) == 1 and \
            flow.same(place, flow.place_of(built.targets[0].target)):
        return "optimizer"
    return None


def _either_model(ctx: Context, model: Model, place: Place) -> bool:
    """`raw = model.module if isinstance(model, nn.DataParallel) else model`: every
    binding of `place` is a choice between the model and the model."""
    flow = ctx.flow
    values = [bound_value(ctx, t) for t in flow.bindings(place)]
    return bool(values) and all(
        isinstance(v, cst.IfExp) and all(flow.same(flow.place_of(flow.strip(
            b.value if isinstance(b, cst.Attribute) and b.attr.value == "module" else b)),
            model.place) for b in (v.body, v.orelse)) for v in values)


def _model_here(ctx: Context, model: Model, call: cst.Call) -> str | None:
    found = model_code_at(ctx.facts, ctx.flow, model, call)
    if found is None:
        ctx.refuse(call, "fsdp.load_state",
                   f"`{ctx.facts.code(call)}`: the optimizer's state of a sharded "
                   "model is gathered and loaded with the model, which cannot be reached "
                   "here", "save and load the optimizer's state where the model is in "
                   "reach (pass it to this function)")
        return None
    return found[0]


def _head(ctx: Context, model: Model, call: cst.Call, owner: str, verb: str) -> str | None:
    """`get_model_state_dict(model, ` or `set_optimizer_state_dict(model, optimizer, `...:
    the call that replaces `call`, up to its state and options; None (refused) when the
    model cannot be reached for an optimizer's state."""
    receiver = call.func.value  # type: ignore[attr-defined]
    found = full_state.model_behind(ctx, model, receiver) if owner == "model" else None
    target = ctx.facts.code(found if found is not None else receiver)  # `model.module`: `model`
    holder = "" if owner == "model" else _model_here(ctx, model, call)
    if holder is None:
        return None
    ctx.need(f"{verb}_{owner}_state_dict", "StateDictOptions", at=call)
    return f"{verb}_{owner}_state_dict({holder + ', ' if holder else ''}{target}, "


def _get_state(ctx: Context, model: Model, call: cst.Call, owner: str) -> None:
    facts, plan, n = ctx.facts, ctx.plan, ctx.names
    head = _head(ctx, model, call, owner, "get")
    if head is None:
        return
    code = f"{head}options={FULL})"
    save = next((a for a in facts.ancestors(call) if isinstance(a, cst.Call)
                 and facts.call_name(a) == "torch.save"), None)
    if save is not None:  # saved by rank 0 only: every rank gathers just before
        stmt = full_state.save_statement(ctx, save)
        assert stmt is not None
        name = n.fresh(f"{owner}_state")
        plan.insert_before(stmt, [statement(f"{name} = {code}  # every rank: gathers the "
                                            "shards\n")])
        plan.rewrite_first(call, lambda _n: cst.Name(name))  # inside `module.` keys, if kept
        what = f"`{name}`, computed on every rank before the save"
    else:
        plan.rewrite_first(call, lambda _n: expression(code))
        what = "on every rank"
    plan.change(call, "fsdp.full_state_dict",
                f"`{facts.code(call)}` -> the full state dict ({what}; rank 0 "
                "gets it, on the CPU, the other ranks an empty dict)" + (
                    ": it loads into the original model" if owner == "model" else
                    ": keyed by parameter name"))


def _set_state(ctx: Context, model: Model, call: cst.Call, owner: str) -> None:
    facts, plan = ctx.facts, ctx.plan
    strict = keyword(call, "strict")
    extra = f", strict={facts.code(strict.value)}" if strict is not None else ""
    options = f"StateDictOptions(full_state_dict=True, broadcast_from_rank0=True{extra})"
    rank = ctx.names.rank
    head = _head(ctx, model, call, owner, "set")
    if head is None:
        return

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        state = code_of(positional(node)[0].value)
        return expression(f"{head}{state} if {rank} == 0 else {{}}, options={options})")

    plan.rewrite(call, rewrite)
    plan.change(call, "fsdp.load_state",
                f"`{facts.code(call.func)}(...)` -> `{head.rstrip(', ')}, ...)`"
                ": rank 0's state (the only one read) is broadcast into every rank's shards")
