"""Sum-reduced losses: the same update on N processes as on one.

A loss that sums over the batch (`reduction="sum"`, `size_average=False`, also inside a
loss function of the script or a criterion object built with it) gives each rank the
sum over its own 1/WORLD_SIZE of the batch; DDP averages the gradients over the ranks,
so every step would be 1/WORLD_SIZE of the single process's. The backward pass is
scaled back:

    loss.backward()                   ->  (loss * WORLD_SIZE).backward()
    scaler.scale(loss).backward()     ->  scaler.scale((loss * WORLD_SIZE)).backward()
    accelerator.backward(loss)        ->  accelerator.backward((loss * WORLD_SIZE))

A loss added up by hand over the batch's samples (`for i in range(batch_size): loss +=
criterion(out[i], y[i])`) is a sum too; one added up over positions or steps is not.
The loss itself (what is printed or logged) is left as it is: each rank's own sum.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, Scope, dotted, keyword, string_value
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step
from distrun.convert.transforms.batch_sums import batch_sums, scale_sums
from distrun.convert.transforms.count_divisor import count_divisors
from distrun.convert.transforms.hand_average import average_free_optimizers
from distrun.convert.transforms.loss_flow import arith, divided, returned_parts
from distrun.convert.transforms.taken_gradients import average_taken_gradients

_DEPTH = 3


def plan_sum_losses(ctx: Context) -> None:
    average_free_optimizers(ctx)  # (the model's rules, once the model is known)
    average_taken_gradients(ctx)
    count_divisors(ctx)
    facts, world = ctx.facts, ctx.names.world_size
    for call in facts.calls:
        if not is_backward(call) or not isinstance(call.func, cst.Attribute):
            continue
        loss = call.func.value
        name = dotted(loss)
        if name is None or _steps_tensors(facts, call):
            continue
        found = sum_reduction(ctx, call, name)
        if found is None:
            sums = batch_sums(ctx, call, name)
            if sums:
                scale_sums(ctx, call, name, sums)
            continue
        ctx.plan.rewrite(loss, lambda n: expression(f"({code_of(n)} * {world})"))
        where = f"{facts.module_of(found).path}:{facts.line(found)}"
        ctx.plan.change(call, "loss.sum_reduction",
                        f"`{name}` sums over the batch (`{' '.join(facts.code(found).split())}` at "
                        f"{where}): its backward is scaled by {world}, since DDP averages the "
                        "ranks' gradients (each step stays the single process's)")


TRANSFORM = Transform("loss", plan_sum_losses)


def _steps_tensors(facts: Facts, backward: cst.Call) -> bool:
    """Is `backward` in a loop that steps an optimizer of tensors listed by hand
    (`optim.SGD([delta], lr=...)`: an adversarial perturbation, an input optimised),
    not of a model's parameters? Its gradients are no DDP's to average."""
    loop = next(iter(facts.enclosing_loops(backward)), None)
    if loop is None:
        return False
    for step in facts.calls_in(loop):
        if not is_optimizer_step(step) or not isinstance(step.func, cst.Attribute) or \
                next(iter(facts.enclosing_loops(step)), None) is not loop:
            continue
        owner = dotted(step.func.value)
        if any(is_optimizer_step(c) and isinstance(c.func, cst.Attribute) and dotted(
                c.func.value) != owner and next(iter(facts.enclosing_loops(c)), None) is loop
               for c in facts.calls_in(loop)):
            return False  # stepped beside the model's (GradNorm's task weights)
        for assign in facts.assigns:
            if isinstance(assign, cst.Assign) and facts.scope(assign) is facts.scope(step) \
                    and any(dotted(t.target) == owner for t in assign.targets) \
                    and isinstance(assign.value, cst.Call) and assign.value.args \
                    and isinstance(assign.value.args[0].value, cst.List):
                return True
    return False


def sum_reduction(ctx: Context, backward: cst.Call, loss: str) -> cst.Call | None:
    """The call that sums the loss over the batch, if the backward's loss comes from one."""
    facts = ctx.facts
    scope = facts.scope(backward)
    values = [a.value for a in facts.assigns if isinstance(a, cst.Assign)
              and facts.scope(a) is scope and facts.line(a) <= facts.line(backward)
              and any(dotted(t.target) == loss for t in a.targets)]
    for value in values:
        found = sums_in(ctx, value, 0)
        if found is not None:
            return found
    return _summed_by_hand(ctx, scope, loss)


def _summed_by_hand(ctx: Context, scope: Scope, loss: str) -> cst.Call | None:
    """`loss += criterion(out[i], y[i])` in a loop over the batch's samples
    (`for i in range(batch_size)`): the call added up, if the backward's loss is one."""
    facts = ctx.facts
    for loop in facts.for_loops:
        if facts.scope(loop) is not scope or not _over_the_batch(facts, loop):
            continue
        for node in _aug_adds(loop.body):
            if dotted(node.target) == loss and isinstance(node.value, cst.Call):
                return node.value
    return None


def _over_the_batch(facts: Facts, loop: cst.For) -> bool:
    """`range(batch_size)`, `range(len(batch))`, `range(args.batch_size)`: a name that says
    batch (not a sequence's positions, whose sum is the same on every rank)."""
    iterable = loop.iter
    return (isinstance(iterable, cst.Call) and dotted(iterable.func) == "range"
            and len(iterable.args) == 1 and "batch" in facts.code(iterable.args[0]).lower())


def _aug_adds(body: cst.CSTNode) -> list[cst.AugAssign]:
    found: list[cst.AugAssign] = []

    class Visit(cst.CSTVisitor):
        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if isinstance(node.operator, cst.AddAssign):
                found.append(node)

    body.visit(Visit())
    return found


def sums_in(ctx: Context, node: cst.CSTNode, depth: int) -> cst.Call | None:
    """The sum-reduced call `node` adds up (in its arithmetic: loss_flow.arith), or one
    a function of the project it calls returns (followed back through its assignments,
    `_DEPTH` calls deep)."""
    facts = ctx.facts
    if isinstance(node, cst.FunctionDef):  # a function: what it returns
        for part in returned_parts(facts, node):
            inner = sums_in(ctx, part, depth)
            if inner is not None:
                return inner
        return None
    if isinstance(node, cst.SimpleStatementLine):  # a statement: what its parts compute
        for small in node.body:
            value = getattr(small, "value", None)
            inner = sums_in(ctx, value, depth) if isinstance(value, cst.BaseExpression) \
                else None
            if inner is not None:
                return inner
        return None
    for call in arith(node)[0]:
        if _is_sum(facts, call) and not divided(facts, call):
            return call
        criterion = _criterion_sum(ctx, call)
        if criterion is not None and not divided(facts, call):
            return criterion
        found = ctx.flow.callee(call)
        if found is not None and depth < _DEPTH:
            for part in returned_parts(facts, found[0]):
                inner = sums_in(ctx, part, depth + 1)
                if inner is not None:
                    return inner
    return None


def _is_sum(facts: Facts, call: cst.Call) -> bool:
    reduction = keyword(call, "reduction")
    if reduction is not None and string_value(reduction.value) == "sum":
        return True
    average = keyword(call, "size_average")
    return average is not None and dotted(average.value) == "False"


def _criterion_sum(ctx: Context, call: cst.Call) -> cst.Call | None:
    """`criterion(out, y)` where `criterion = nn.MSELoss(reduction="sum")`."""
    if not isinstance(call.func, (cst.Name, cst.Attribute)):
        return None
    place = ctx.flow.place_of(call.func)
    if place is None:
        return None
    for target in ctx.flow.bindings(place):
        assign = ctx.facts.parent.get(ctx.facts.parent.get(target, target))
        value = assign.value if isinstance(assign, cst.Assign) else None
        if isinstance(value, cst.Call) and _is_sum(ctx.facts, value):
            return value
    return None
