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
A forward pass of the model outside the engine (evaluation) gathers through the hooks
ZeRO-3 puts on the module itself: left as it is.

Won't: a whole-module save (`torch.save(model, path)`: it would pickle the shards and
DeepSpeed's hooks; refused with the fix); uses of `model.parameters()` that read the
weights' values after the engine is made (a parameter count, a histogram): reported, as
each parameter is empty (numel 0) there.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import positional
from distrun.convert.build import Rewrite, constant, expression, with_block
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.targets.base import is_model_optimizer
from distrun.convert.transforms.checkpoint import file_opened_around

_GATHER = "deepspeed.zero.GatheredParameters"
_SAFE_ATTRIBUTES = frozenset({"device", "dtype", "requires_grad", "is_cuda"})


def plan_zero3(ctx: Context) -> None:
    if ctx.refusal is not None or len(ctx.models) != 1:
        return
    facts, plan = ctx.facts, ctx.plan
    wrapped: set[cst.CSTNode] = set()
    for call in facts.calls:
        name, method = facts.call_name(call), method_name(call)
        if name == "torch.save" and positional(call) and _is_model(ctx, positional(call)[0].value):
            ctx.refuse(call, "deepspeed.zero3_whole_model",
                       "the whole model is saved (pickled): under ZeRO-3 it holds only "
                       "this rank's shards and DeepSpeed's hooks", "save `model.state_dict()` "
                       "instead, then convert again (or convert with --zero 2)")
        elif method in ("state_dict", "load_state_dict") and _is_model(ctx, _receiver(call)):
            stmt = _statement(ctx, call)
            if stmt is None or stmt in wrapped:
                continue
            wrapped.add(stmt)
            model = facts.code(_receiver(call))
            modify = ", modifier_rank=0" if method == "load_state_dict" else ""
            head = f"{_GATHER}(list({model}.parameters()){modify})"
            ctx.need("deepspeed", at=call)
            plan.rewrite(stmt, _gathered(head))
            plan.change(call, "deepspeed.zero3_gather",
                        f"ZeRO-3: `{model}`'s weights gathered on every "
                        f"rank around `{facts.code(call)}`" + (
                            " (rank 0's loaded values are then sharded to all)"
                            if modify else " (each rank holds a shard of them)"))
        elif method == "state_dict" and is_model_optimizer(ctx, call):
            _optimizer_state(ctx, call)
        elif method in ("parameters", "named_parameters") \
                and _is_model(ctx, _receiver(call)) and _reads_values(ctx, call):
            plan.finding(call, "deepspeed.zero3_parameters",
                         f"under ZeRO-3 `{facts.code(call)}` gives each "
                         "rank's placeholders outside a forward pass: every parameter is "
                         "empty there (numel() is 0, no values)",
                         f"read them inside `with {_GATHER}(list({facts.code(_receiver(call))}"
                         ".parameters())):` on every rank (or use `p.ds_numel` to count)")



def _gathered(head: str) -> Rewrite:
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.BaseStatement)
        return with_block(head, [node])
    return rewrite


def _receiver(call: cst.Call) -> cst.BaseExpression:
    assert isinstance(call.func, cst.Attribute)
    return call.func.value


def _is_model(ctx: Context, expr: cst.BaseExpression) -> bool:
    """Is `expr` the trained model itself (by any name it goes by)?"""
    flow = ctx.flow
    place = flow.place_of(flow.strip(expr))
    return place is not None and flow.root(place) in {flow.root(p) for p in
                                                       ctx.models[0].component}


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
