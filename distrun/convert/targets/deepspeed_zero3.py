"""ZeRO-3 (`--to deepspeed --zero 3`): outside a forward pass each rank holds only a shard
of every weight, so whatever reads or writes the model's weights gathers them first.

    if RANK == 0:                          ->  with deepspeed.zero.GatheredParameters(
        torch.save(model.state_dict(), p)          list(model.parameters())):
                                                   if RANK == 0:
                                                       torch.save(model.state_dict(), p)
    model.load_state_dict(state)           ->  with deepspeed.zero.GatheredParameters(
                                                   list(model.parameters()), modifier_rank=0):
                                                   model.load_state_dict(state)

The gathering is a collective: it goes around the rank-0 guard, so every rank takes
part, and it is a no-op where the weights are whole (before `deepspeed.initialize`).
The model is reached by any way the script has (`model.module` of a removed
DataParallel, `getattr(model, "module", model)`, a helper's parameter: see
`full_state`), its state wherever it is read (saved directly or in a dict, deep-copied
for a best model, a comprehension over it). The whole module saved keeps saving a module:

    torch.save(model, p)           ->  with deepspeed.zero.GatheredParameters(...):
                                           if RANK == 0:
                                               torch.save(plain_module(model,
                                                   model.state_dict()), p)

the script's own class with the full weights, on the CPU (`keep_plain_copy(model)` keeps
its weightless copy before `deepspeed.initialize`). A function of the script called in a
saved object that reads the state (or runs the model) runs on every rank, just before
the save (it gathers the weights: rank 0 alone would wait for the others).
A forward pass of the model outside the engine (evaluation) gathers through the hooks
ZeRO-3 puts on the module itself: left as it is.

Won't: a dict or list holding the whole model built before the line that saves it, a
function reading the state called in a saved object where it may not run (refused with
the fix); uses of `model.parameters()` that read the weights' values after the engine is
made (a parameter count, a histogram): reported, as each parameter is empty (numel 0)
there.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.build import Rewrite, code_of, constant, expression, with_block
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.models import Model
from distrun.convert.targets import full_state
from distrun.convert.targets.base import is_model_optimizer
from distrun.convert.transforms.checkpoint import file_opened_around

_GATHER = "deepspeed.zero.GatheredParameters"
_SAFE_ATTRIBUTES = frozenset({"device", "dtype", "requires_grad", "is_cuda"})


def keep_plain_copy(ctx: Context, model: Model, code: str, at: cst.CSTNode
                    ) -> list[cst.BaseStatement]:
    """Before `deepspeed.initialize` shards `model` (written `code` at `at`): the statement
    that keeps its weightless copy, if a save of the whole module follows."""
    if ctx.options.zero != 3 or not any(full_state.saved_whole(ctx, model, save)
                                        for save in full_state.saves(ctx)
                                        if not _before_engine(ctx, model, save)):
        return []
    return [full_state.keep_plain_copy(ctx, code, at)]


def plan_zero3(ctx: Context) -> None:
    if ctx.refusal is not None or len(ctx.models) != 1:
        return
    facts, plan, model = ctx.facts, ctx.plan, ctx.models[0]
    wrapped: set[cst.CSTNode] = set()
    for save in full_state.saves(ctx):
        if not _before_engine(ctx, model, save):
            _save(ctx, model, save, wrapped)
        if ctx.refusal is not None:
            return
    for call in facts.calls:
        method = method_name(call)
        if method in ("state_dict", "load_state_dict") and _is_model(ctx, _receiver(call)):
            stmt = _statement(ctx, call)
            modify = method == "load_state_dict"
            if stmt is None or not _gather(ctx, stmt, _model_code(ctx, call), modify, wrapped):
                continue
            plan.change(call, "deepspeed.zero3_gather",
                        f"ZeRO-3: `{_model_code(ctx, call)}`'s weights gathered on every "
                        f"rank around `{facts.code(call)}`" + (
                            " (rank 0's loaded values are then sharded to all)"
                            if modify else " (each rank holds a shard of them)"))
        elif method == "state_dict" and is_model_optimizer(ctx, call):
            _optimizer_state(ctx, call)
        elif method in ("parameters", "named_parameters") and full_state.model_behind(
                ctx, model, _receiver(call), methods=False) is not None \
                and _reads_values(ctx, call):
            plan.finding(call, "deepspeed.zero3_parameters",
                         f"under ZeRO-3 `{facts.code(call)}` gives each "
                         "rank's placeholders outside a forward pass: every parameter is "
                         "empty there (numel() is 0, no values)",
                         f"read them inside `with {_GATHER}(list({facts.code(_receiver(call))}"
                         ".parameters())):` on every rank (or use `p.ds_numel` to count)")


def _gather(ctx: Context, stmt: cst.CSTNode, model: str, modify: bool,
            wrapped: set[cst.CSTNode]) -> bool:
    """`stmt` inside `with GatheredParameters(list(model.parameters())...):`, once; False
    when it already is."""
    if stmt in wrapped:
        return False
    wrapped.add(stmt)
    ctx.need("deepspeed", at=stmt)
    ctx.plan.rewrite(stmt, _gathered(f"{_GATHER}(list({model}.parameters())"
                                     f"{', modifier_rank=0' if modify else ''})"))
    return True


_WORDS = full_state.SaveWords(
    "deepspeed.zero3_whole_model", "deepspeed.zero3_every_rank",
    ("model", "under ZeRO-3 it would pickle this rank's shards and DeepSpeed's hooks"),
    ("the weights", "the model's weights (ZeRO-3 gathers every rank's shards)"))


def _save(ctx: Context, model: Model, save: cst.Call, wrapped: set[cst.CSTNode]) -> None:
    """What `save` saves, computed where every rank gathers: the calls of the script's
    functions that read the state, the whole module as a plain one."""
    facts, plan = ctx.facts, ctx.plan
    prepared = full_state.prepare_save(ctx, model, save, _WORDS)
    if prepared is None or not prepared[1]:
        return
    stmt, whole = prepared
    found = full_state.model_behind(ctx, model, whole[0])
    assert found is not None
    code = facts.code(found)
    _gather(ctx, stmt, code, False, wrapped)
    helper, extra = full_state.plain_module(ctx, model, save)
    for expr in whole:
        plan.rewrite(expr, lambda e: expression(  # the module as the line now reaches it
            f"{helper}({code_of(e)}, {_operand(e)}.state_dict(){extra})"))
    plan.change(save, "deepspeed.zero3_plain_module", f"`{facts.code(save)}` saves the "
                f"whole module: `{helper}(...)`, a plain module of its own class (its "
                "copy kept before `deepspeed.initialize`) holding the full weights gathered "
                "on every rank, on the CPU: it loads without DeepSpeed, as the original's did")


def _operand(node: cst.CSTNode) -> str:
    """`node` as code that can take an attribute (`(a if c else b)`)."""
    code = code_of(node)
    simple = isinstance(node, (cst.Name, cst.Attribute, cst.Call)) or bool(
        getattr(node, "lpar", None))
    return code if simple else f"({code})"


def _before_engine(ctx: Context, model: Model, node: cst.CSTNode) -> bool:
    """Does `node` run before the engine shards the model (in the function that builds its
    optimizer, on an earlier line)?"""
    facts = ctx.facts
    return facts.scope(node) is facts.scope(model.optimizer) and \
        facts.module_of(node) is facts.module_of(model.optimizer) and \
        facts.line(node) < facts.line(model.optimizer)


def _gathered(head: str) -> Rewrite:
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.BaseStatement)
        return with_block(head, [node])
    return rewrite


def _receiver(call: cst.Call) -> cst.BaseExpression:
    assert isinstance(call.func, cst.Attribute)
    return call.func.value


def _is_model(ctx: Context, expr: cst.BaseExpression) -> bool:
    """Is `expr` the trained model itself (by any way the script reaches it)?"""
    return full_state.model_behind(ctx, ctx.models[0], expr) is not None


def _model_code(ctx: Context, call: cst.Call) -> str:
    """The model whose method `call` calls, as code (`model` for `model.module`)."""
    found = full_state.model_behind(ctx, ctx.models[0], _receiver(call))
    return ctx.facts.code(found if found is not None else _receiver(call))


def _statement(ctx: Context, call: cst.Call) -> cst.CSTNode | None:
    """The statement every rank runs that holds `call`: a save's `with open(...)` block
    when the checkpoint transform guards that one."""
    facts = ctx.facts
    stmt = facts.statement(call)
    if stmt is None:
        return None
    outer = next((c for c in facts.ancestors(call) if isinstance(c, cst.Call)
                  and facts.call_name(c) == "torch.save"), None)
    opened = file_opened_around(facts, stmt) if outer is not None else None
    return opened if opened is not None else stmt


def _optimizer_state(ctx: Context, call: cst.Call) -> None:
    """Under ZeRO-3 the torch optimizer's own state_dict() fails (its groups hold ZeRO's
    flat shards): in a saved checkpoint its entry becomes None, the state itself is in
    the engine's checkpoint (see `ds_checkpoint`); anywhere else it is refused."""
    facts = ctx.facts
    saved = any(isinstance(a, cst.Call) and facts.call_name(a) == "torch.save"
                for a in facts.ancestors(call))
    if not saved:
        ctx.refuse(call, "deepspeed.zero3_optimizer_state",
                   f"`{facts.code(call)}`: under ZeRO-3 the optimizer's state exists "
                   "only as each rank's shard, inside the engine", "save and resume it with "
                   "`engine.save_checkpoint(dir)` / `engine.load_checkpoint(dir)` on every "
                   "rank, or convert with --zero 2")
        return
    ctx.plan.rewrite(call, constant(expression("None")))
    ctx.plan.change(call, "deepspeed.zero3_optimizer_state",
                    f"ZeRO-3: `{facts.code(call)}` saved as None: the "
                    "optimizer's state is each rank's shard, saved by the engine's "
                    "save_checkpoint beside this file")


def _reads_values(ctx: Context, call: cst.Call) -> bool:
    """Does this use of the parameters read their values after the engine is made? Not:
    the optimizer's construction, `next(model.parameters()).device` (and dtype...), a
    use before the optimizer is built in the same function (the weights are whole)."""
    facts = ctx.facts
    optimizer = ctx.models[0].optimizer
    if any(a is optimizer or isinstance(a, cst.Call) and (facts.call_name(a) or "")
           .startswith("torch.nn.utils.") for a in facts.ancestors(call)):
        return False
    if facts.function(call) is facts.function(optimizer) \
            and facts.line(call) < facts.line(optimizer):
        return False
    arg = facts.parent.get(call)
    parent = facts.parent.get(arg) if arg is not None else None  # call -> Arg -> next(...)
    if isinstance(parent, cst.Call) and facts.code(parent.func) in ("next", "iter"):
        attribute = facts.parent.get(parent)
        return not (isinstance(attribute, cst.Attribute)
                    and attribute.attr.value in _SAFE_ATTRIBUTES)
    return True
