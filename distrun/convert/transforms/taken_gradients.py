"""Gradients of the model's parameters taken by hand over the batch (part of the loss
transform).

`torch.autograd.grad(loss, model.parameters())` of a loss over the rank's share of the
batch is that share's gradient: DDP averages only what a backward pass accumulates into
`.grad`, so what the script does with these (DARTS' virtual step `w - xi * g`, the
Hessian's finite differences moving the weights by `eps * dw` and back, a hand-written
update) would be each rank's own, and the ranks would drift apart (khanrc/pt.darts:
launch --check, `params-diverged`). The single process took them over the whole batch;
the mean of the ranks' gradients of a mean loss over equal shares is that gradient:

    gradients = torch.autograd.grad(loss, self.net.weights())
 -> gradients = averaged_gradients(torch.autograd.grad(loss, self.net.weights()))

Only where the call is reached from a training loop (every rank makes the collective),
its `inputs` are parameters of a model of the project (a gradient penalty's inputs are
data: each sample's own) and its loss is over the batch: a loss over one item of the
batch (MAML's `loss = F.cross_entropy(logits, y_spt[i])` for each task `i`, a Fisher
estimate's per-sample log-likelihoods) is that item's, left. Not with
`create_graph=True`: the all-reduce would cut the graph a penalty differentiates
through; such a call is reported (`model.taken_gradients`, warning).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, keyword, positional
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import train_loops
from distrun.convert.models import parameters_in
from distrun.convert.names import Names
from distrun.convert.syntax import walk

_DEPTH = 3


def average_taken_gradients(ctx: Context) -> None:
    facts = ctx.facts
    calls = [c for c in facts.calls if (facts.call_name(c) or "") == "torch.autograd.grad"]
    if not calls:
        return
    reached = _reached_from_training(ctx)
    for call in calls:
        func = facts.function(call)
        inputs = keyword(call, "inputs") or (positional(call)[1] if len(
            positional(call)) > 1 else None)
        outputs = keyword(call, "outputs") or (positional(call)[0] if positional(call)
                                               else None)
        innermost = next(iter(facts.enclosing_loops(call)), None)
        if inputs is None or outputs is None or not (
                id(func) in reached or innermost is not None and id(innermost) in reached):
            continue
        if not parameters_in(facts, inputs.value, ctx.flow) or _per_item(ctx, call,
                                                                          outputs.value):
            continue
        graph = keyword(call, "create_graph")
        if graph is not None and dotted(graph.value) != "False":
            ctx.plan.finding(call, "model.taken_gradients", "`torch.autograd.grad` of the "
                             "model's parameters over this rank's share of the batch, with "
                             "`create_graph=True`: each rank's own gradients (the single "
                             "process took them over the whole batch), not averaged",
                             "all-reduce them with a differentiable collective "
                             "(`torch.distributed.nn.functional.all_reduce`) and divide by "
                             "the world size", severity="warning")
            continue
        if ctx.target.name != "ddp":
            continue
        n = ctx.names
        ctx.need("dist", at=call)
        ctx.define_helper("averaged_gradients", call, averaged_code(n))
        ctx.plan.rewrite(call, lambda node, name=n.averaged_gradients: expression(
            f"{name}({code_of(node)})"))  # type: ignore[misc]
        ctx.plan.change(call, "model.taken_gradients", "`torch.autograd.grad` of the model's "
                        "parameters over this rank's share of the batch: averaged over the "
                        f"ranks (`{n.averaged_gradients}(...)`), the whole batch's gradients "
                        "as the single process took them, so what the script does with "
                        "them (a virtual step, a hand-made update) is the same on every rank")


def _reached_from_training(ctx: Context) -> dict[int, cst.CSTNode]:
    """The training loops, and the functions their steps call (3 calls deep), by id: a
    call in a loop of its own inside the training loop (an evaluation over the test
    tasks, MAML's fine-tuning on each) is not the step's."""
    facts, flow = ctx.facts, ctx.flow
    found: dict[int, cst.CSTNode] = {}
    todo: list[cst.CSTNode] = []
    for loop in train_loops(facts, flow):
        found[id(loop.loop)] = loop.loop
        todo.append(loop.loop)
    for _ in range(_DEPTH):
        nxt: list[cst.CSTNode] = []
        for body in todo:
            for inner in facts.calls_in(body):
                if isinstance(body, cst.For) and next(iter(facts.enclosing_loops(inner)),
                                                      None) is not body:
                    continue
                callee = flow.callee(inner)
                if callee is not None and id(callee[0]) not in found:
                    found[id(callee[0])] = callee[0]
                    nxt.append(callee[0])
        todo = nxt
    return found


def _per_item(ctx: Context, call: cst.Call, loss: cst.BaseExpression) -> bool:
    """Is `loss` one item's (a loop's variable, or made from `x[i]` with `i` a loop's
    variable around the call)?"""
    facts = ctx.facts
    loop_vars = {n.value for loop in facts.enclosing_loops(call) if isinstance(loop, cst.For)
                 for n in walk(loop.target) if isinstance(n, cst.Name)}
    if not loop_vars:
        return False
    name = dotted(loss)
    if name in loop_vars:
        return True
    made = [loss]
    if name is not None:
        made += [a.value for a in facts.assigns if isinstance(a, cst.Assign) and facts.scope(
            a) is facts.scope(call) and any(dotted(t.target) == name for t in a.targets)]
    return any(isinstance(node, cst.Subscript) and any(
        isinstance(n, cst.Name) and n.value in loop_vars for n in walk(node.slice[0]))
        for value in made for node in walk(value))


def averaged_code(n: Names) -> str:
    return f'''

def {n.averaged_gradients}(gradients):
    """distrun: gradients of a loss over this rank's share of the batch, averaged over the
    ranks: the whole batch's, as one process takes them."""
    if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
        return gradients
    averaged = []
    for gradient in gradients:
        if gradient is not None:
            gradient = gradient.clone()
            {n.dist}.all_reduce(gradient)
            gradient /= {n.dist}.get_world_size()
        averaged.append(gradient)
    return tuple(averaged)
'''
