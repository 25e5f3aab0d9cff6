"""A model with no training forward pass the converter can follow, kept in step by
averaging its gradients by hand (part of the model transform).

The optimizer is built from a container's parameters (an `nn.ModuleList` the student and
its heads were appended to: HobbitLong/RepDistiller), and the members are called through
`container[0]` in another module; or the forward goes through an expression no wrapper
can stand in for. Left as it was, each rank would train its own model with exit 0.
Instead, the DDP target does by hand what DDP does: every rank starts from rank 0's
weights (broadcast once the optimizer is built), and before each step of that optimizer
its gradients are averaged over the ranks:

    optimizer = SGD(trainable.parameters())   ->  optimizer = SGD(trainable.parameters())
                                                  broadcast_parameters(optimizer)
    loss.backward()                               loss.backward()
    optimizer.step()                              average_gradients(optimizer)
                                                  optimizer.step()

The same steps as DDP (averaging is linear), without its overlap of communication with
the backward pass: slower on many GPUs, reported as such. Buffers (BatchNorm's running
statistics) stay each rank's own, as with DDP's `broadcast_buffers=False`. Only for the
DDP target, and only where every step of the optimizer is found (a step the analysis does
not see would go unaveraged): otherwise the model is refused as before (model.no_forward).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.build import statement
from distrun.convert.context import Context
from distrun.convert.idioms import is_optimizer, is_optimizer_step
from distrun.convert.models import Model, feeds_backward, parameters_in
from distrun.convert.names import Names


def side_forwards(ctx: Context, model: Model) -> list[cst.Call]:
    """Training calls of another method of the model that runs its forward
    (`y = model.triplet(u, i, j)`, whose body is `self.forward(u, i) - self.forward(u,
    j)`): DDP averages only what goes through its own forward, so such a step would
    leave the ranks apart, silently."""
    facts, flow = ctx.facts, ctx.flow
    found = []
    for call in facts.calls:
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value in ("forward", "__call__") \
                or not flow.same(flow.place_of(func.value), model.place):
            continue
        callee = flow.callee(call)
        named = [f for f in facts.function_defs if f.name.value == func.attr.value
                 and facts.enclosing_class(f) is not None] if callee is None else []
        if callee is None and (func.attr.value in _MODULE_API or named and len(named) <= 3
                               and not any(_runs_forward(facts, f) for f in named)) \
                or callee is not None and not _runs_forward(facts, callee[0]):
            continue  # (a method the analysis cannot read may run the forward: taken; on
            # a model of no known class, the project's methods of that name are read)
        if feeds_backward(facts, call):
            found.append(call)
    return found


# torch.nn.Module's own methods: none runs the forward
_MODULE_API = frozenset(name for name in dir(object) + [
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "modules",
    "named_children", "named_modules", "state_dict", "load_state_dict", "train", "eval",
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "zero_grad", "apply",
    "requires_grad_", "register_buffer", "register_parameter", "add_module", "get_submodule",
    "get_parameter", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "extra_repr", "type", "share_memory"])


def _runs_forward(facts: Facts, method: cst.FunctionDef) -> bool:
    return any(dotted(c.func) in ("self.forward", "self") for c in facts.calls_in(method))


def average_by_hand(ctx: Context, model: Model, side: list[cst.Call] | None = None) -> bool:
    """Plan the broadcast and the averages for `model`; False if it cannot be done.
    `side`: the model is wrapped too, these training calls go around its forward."""
    facts, flow = ctx.facts, ctx.flow
    made = model.optimizer
    assign = facts.parent.get(made)
    if ctx.target.name != "ddp" or not isinstance(made, cst.Call) or not isinstance(
            assign, cst.Assign) or len(assign.targets) != 1:
        return False
    target = assign.targets[0].target
    optimizer = flow.place_of(target)
    built = facts.statement(made)
    steps = [c for c in facts.calls if is_optimizer_step(c) and isinstance(c.func, cst.Attribute)
             and flow.same(flow.place_of(c.func.value), optimizer)]
    steps += [c for c in _listed_steps(ctx, target) if c not in steps]
    if optimizer is None or built is None or not steps or any(
            not isinstance(facts.statement(s), cst.SimpleStatementLine) for s in steps):
        return False
    n = ctx.names
    name = facts.code(target)
    ctx.need("torch", "dist", at=made)
    ctx.define_helper("average_gradients", made, average_code(n))
    ctx.define_helper("broadcast_parameters", made, broadcast_code(n))
    ctx.plan.insert_after(built, [statement(f"{n.broadcast_parameters}({name})\n")])
    why = (f"`{facts.code(side[0].func)}(...)` (line {facts.line(side[0])}) trains "
           f"`{model.place.code}` through a method of its own, around the forward "
           "DistributedDataParallel averages" if side else f"no training forward pass of "
           f"`{model.place.code}` found to give a DistributedDataParallel object (a container "
           "of modules, or calls the analysis cannot follow)")
    ctx.plan.change(made, "model.hand_average", f"{why}: "
                    f"`{n.broadcast_parameters}({name})` gives every rank rank 0's weights, "
                    f"and its gradients are averaged by hand before every `{name}.step()`: "
                    "DDP's steps, without its overlap of communication with the backward "
                    "pass (slower on many GPUs)")
    for step in steps:
        ctx.need("dist", at=step)
        ctx.define_helper("average_gradients", step, average_code(n))
        stmt = facts.statement(step)
        if stmt is None:
            continue
        receiver = facts.code(step.func.value)  # type: ignore[attr-defined]
        ctx.plan.insert_before(before_clipping(facts, stmt),
                               [statement(f"{n.average_gradients}({receiver})\n")])
    return True


def _listed_steps(ctx: Context, target: cst.BaseExpression) -> list[cst.Call]:
    """Steps of the optimizer `target` names through a list it is appended to (deep mutual
    learning's peers: `self.optimizers.append(optimizer)`, then
    `self.optimizers[i].step()` or `for opt in self.optimizers: opt.step()`)."""
    facts, flow = ctx.facts, ctx.flow
    code = dotted(target)
    lists = [flow.place_of(call.func.value) for call in facts.calls
             if isinstance(call.func, cst.Attribute) and call.func.attr.value == "append"
             and len(call.args) == 1 and dotted(call.args[0].value) == code
             and facts.scope(call) is facts.scope(target)]
    lists = [p for p in lists if p is not None]
    if code is None or not lists:
        return []
    members = {id(loop.target) for loop in facts.for_loops if isinstance(
        loop.target, cst.Name) and any(flow.same(flow.place_of(loop.iter), p) for p in lists)}
    found = []
    for call in facts.calls:
        if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "step":
            continue  # (`self.optimizers[i].step()`: not an optimizer's by its receiver)
        owner = call.func.value
        if isinstance(owner, cst.Subscript) and any(
                flow.same(flow.place_of(owner.value), p) for p in lists):
            found.append(call)
        elif isinstance(owner, cst.Name) and any(
                id(loop.target) in members and loop.target.value == owner.value  # type: ignore[attr-defined]
                and facts.inside(call, loop) for loop in facts.for_loops):
            found.append(call)
    return found


def average_free_optimizers(ctx: Context) -> None:
    """An optimizer of tensors of the script's own, listed by hand (GradNorm's task
    weights: `optimizer2 = torch.optim.Adam([weights], lr=...)`), stepped in the same loop
    as the model's optimizer: its gradients come from the rank's own batch and no DDP
    averages them, so each rank's tensors drift apart, silently. They are averaged by
    hand before each of its steps. The same for an optimizer whose parameters the analysis
    tied to no model (DARTS' `Adam(model.alphas())`, a generator of the model's class over
    the architecture weights, whose gradients `torch.autograd.grad` gives and the script
    sets by hand). An optimizer of tensors stepped in a loop of its own (an adversarial
    perturbation's) is each sample's business: left."""
    facts = ctx.facts
    for step in facts.calls:
        if not is_optimizer_step(step) or not isinstance(step.func, cst.Attribute):
            continue
        loop = next(iter(facts.enclosing_loops(step)), None)
        owner = dotted(step.func.value)
        place = ctx.flow.place_of(step.func.value)  # also handed on: `train(..., alpha_optim)`
        made = [a for a in facts.assigns if isinstance(a, cst.Assign) and (
                facts.scope(a) is facts.scope(step) and any(
                    dotted(t.target) == owner for t in a.targets) or place is not None and any(
                    ctx.flow.same(ctx.flow.place_of(t.target), place) for t in a.targets))]
        stmt = facts.statement(step)
        listed = bool(made) and all(_tensor_list(a.value) for a in made)
        if loop is None or owner is None or not made or not (listed or all(
                _unresolved(ctx, a.value) for a in made)) or not isinstance(
                stmt, cst.SimpleStatementLine) or not any(
                is_optimizer_step(c) and c is not step and isinstance(c.func, cst.Attribute)
                and dotted(c.func.value) != owner
                and next(iter(facts.enclosing_loops(c)), None) is loop
                for c in facts.calls_in(loop)):
            continue
        if ctx.target.name != "ddp":
            ctx.plan.finding(step, "model.free_tensors", f"`{owner}` steps tensors of the "
                             "script's own from each rank's batch: no wrapper averages them, "
                             "so each rank's drift apart", f"all-reduce their gradients and "
                             f"divide by the world size before `{owner}.step()`")
            continue
        first = made[0].value
        given = facts.code(first.args[0].value) if isinstance(first, cst.Call) else owner
        what = "tensors of the script's own (listed by hand)" if listed else \
            f"parameters no wrapped model holds (`{given}`)"
        if average_before(ctx, step, owner):
            ctx.plan.change(step, "model.free_tensors",
                            f"`{owner}` steps {what} beside the model's optimizer, from each "
                            "rank's batch: their gradients are averaged over the ranks by "
                            f"hand before `{owner}.step()`, so every rank keeps the same "
                            "tensors")


def average_before(ctx: Context, step: cst.Call, optimizer: str) -> bool:
    """`average_gradients(optimizer)` before the statement of `step` (False: no
    statement to put it before)."""
    stmt = ctx.facts.statement(step)
    if stmt is None:
        return False
    n = ctx.names
    ctx.need("dist", at=step)
    ctx.define_helper("average_gradients", step, average_code(n))
    ctx.plan.insert_before(before_clipping(ctx.facts, stmt),
                           [statement(f"{n.average_gradients}({optimizer})\n")])
    return True


_CLIPS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grad_value")


def before_clipping(facts: Facts, stmt: cst.CSTNode) -> cst.CSTNode:
    """Where the average goes: before the step's statement, or before the gradient
    clipping that precedes it in its block (`clip_grad_norm_(...)` then `step()`): DDP
    averages in the backward pass, so the clip sees the averaged gradients (clipped per
    rank first, a rank's large gradient would be cut alone)."""
    block = facts.parent.get(stmt)
    body = list(getattr(block, "body", ()))
    if stmt not in body:
        return stmt
    first = stmt
    for before in reversed(body[:body.index(stmt)]):
        calls = [c for c in facts.calls_in(before)] if isinstance(
            before, cst.SimpleStatementLine) else []
        if not calls or not any((facts.call_name(c) or "").endswith(_CLIPS) for c in calls):
            break
        first = before
    return first


def _unresolved(ctx: Context, value: cst.BaseExpression) -> bool:
    """`Adam(model.alphas(), ...)`: an optimizer whose parameters the analysis tied to no
    model (no wrapper averages their gradients)."""
    return isinstance(value, cst.Call) and is_optimizer(ctx.facts, value) and bool(
        value.args) and value.args[0].keyword is None and not any(
        m.optimizer is value for m in ctx.models) and not parameters_in(
        ctx.facts, value.args[0].value, ctx.flow)


def _tensor_list(value: cst.BaseExpression) -> bool:
    """`Adam([weights], lr=...)`: an optimizer of names listed by hand."""
    return isinstance(value, cst.Call) and bool(value.args) and isinstance(
        value.args[0].value, cst.List) and bool(value.args[0].value.elements) and all(
        isinstance(e.value, cst.Name) for e in value.args[0].value.elements)


def average_code(n: Names) -> str:
    return f'''

def {n.average_gradients}(optimizer):
    """distrun: the gradients `optimizer` steps with, averaged over the ranks by hand (a
    parameter with a gradient on any rank gets one on every rank, zeros where it had
    none, so that every rank makes the same collectives)."""
    if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params:
        return
    has = [float(p.grad is not None) for p in params]
    present = params[0].new_tensor(has)
    {n.dist}.all_reduce(present, op={n.dist}.ReduceOp.MAX)
    for parameter, wanted in zip(params, present.tolist()):
        if wanted:
            if parameter.grad is None:
                parameter.grad = parameter.detach().new_zeros(parameter.shape)
            {n.dist}.all_reduce(parameter.grad)
            parameter.grad /= {n.dist}.get_world_size()
'''


def broadcast_code(n: Names) -> str:
    return f'''

def {n.broadcast_parameters}(optimizer):
    """distrun: every rank starts from rank 0's weights (what DDP does when it wraps).
    NCCL sends only GPU tensors: a parameter not moved to the GPU yet goes through one."""
    if not {n.dist}.is_initialized():
        return
    through_gpu = {n.dist}.get_backend() == "nccl"
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if through_gpu and parameter.device.type != "cuda":
                sent = parameter.data.to(torch.device("cuda", torch.cuda.current_device()))
                {n.dist}.broadcast(sent, src=0)
                parameter.data.copy_(sent)
            else:
                {n.dist}.broadcast(parameter.data, src=0)
'''
