"""Losses divided by a count taken over the rank's batch (part of the loss transform).

    class MultiBoxLoss(nn.Module):                 (ssd.pytorch, RetinaFace, pytorch-ssd
        def forward(self, predictions, targets):    and their many copies; a token loss
            ...                                     over a padding mask)
            num_pos = pos.long().sum(1, keepdim=True)
            N = max(num_pos.data.sum().float(), 1)          N = mean_over_ranks(max(...))
            loss_l /= N

The single process divides the sum over the whole batch by the whole batch's count. Each
rank now divides its share's sum by its share's count, and DDP averages the ratios: not
the ratio of the sums, whenever the shares hold different counts (the number of matched
anchors, of tokens that are not padding). The count becomes its mean over the ranks, N
(whole) / WORLD_SIZE: each rank's loss is then its sum x WORLD_SIZE / N (whole), and their
average is the single process's. A collective: every rank calls the loss at every step
(as DDP's backward needs), and an evaluation calls it on every rank alike.

Taken: `N = <an expression with a .sum() of no dimension>` or `N = x.size(0)` /
`x.numel()` of `x = y[mask]`, in a loss's code (a `forward` of a class named ...Loss, a
function named ...loss...), a name then divided by (`/ N`, `/= N`). Won't: counts in other
code (report none), a division in the training loop itself.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, positional, walk
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.models import without_gradients
from distrun.convert.transforms.agreed import helper_code


def count_divisors(ctx: Context) -> None:
    if not ctx.train_loaders and not ctx.hand_shared:
        return
    facts, n = ctx.facts, ctx.names
    for func in facts.function_defs:
        if not _loss_code(ctx, func):
            continue
        divisors = _divisors(func)
        _counts_given(ctx, func, divisors)
        for assign in [a for a in facts.assigns if isinstance(a, cst.Assign)
                       and facts.function(a) is func and len(a.targets) == 1]:
            name = dotted(assign.targets[0].target)
            if name not in divisors or not _count(ctx, func, assign.value):
                continue
            number = isinstance(assign.value, cst.Call) and method_name(assign.value) in (
                "size", "numel")
            ctx.define_helper("mean_over_ranks", assign, helper_code(n))
            ctx.need("torch", "dist", at=assign)
            wrap = f"{n.mean_over_ranks}(float({{}}))" if number else \
                f"{n.mean_over_ranks}({{}})"
            ctx.plan.rewrite(assign.value, lambda node, wrap=wrap: expression(  # type: ignore[misc]
                wrap.format(code_of(node))))
            ctx.plan.change(assign, "loss.count_divisor",
                            f"`{name}` counts over this rank's share of the batch what the loss "
                            "is divided by: its mean over the ranks (the whole batch's count / "
                            "WORLD_SIZE), so the ranks' averaged gradients are the single "
                            "process's (each rank's own count would weigh the ranks' ratios "
                            "alike)")


def divides_by_count(ctx: Context, division: cst.CSTNode) -> bool:
    """Is `division` a sum divided by a count this transform makes whole (`... / N`)? (A
    masked mean: not gathered as a ratio of sums by the batch_loss transform as well.)"""
    facts = ctx.facts
    func = facts.function(division)
    name = dotted(division.right) if isinstance(division, cst.BinaryOperation) else None
    if func is None or name is None or not ctx.train_loaders or not _loss_code(ctx, func):
        return False
    return any(isinstance(a, cst.Assign) and facts.function(a) is func and len(a.targets) == 1
               and dotted(a.targets[0].target) == name and _count(ctx, func, a.value)
               for a in facts.assigns)


def _loss_code(ctx: Context, func: cst.FunctionDef) -> bool:
    """A loss's `forward` (a class named ...Loss), a loss object's `__call__` (the
    Annotated Transformer's SimpleLossCompute), or a function named ...loss..."""
    cls = ctx.facts.enclosing_class(func)
    if cls is not None and func.name.value in ("forward", "__call__"):
        name = cls.name.value.lower()
        return name.endswith("loss") or func.name.value == "__call__" and "loss" in name
    return cls is None and "loss" in func.name.value.lower()


def _counts_given(ctx: Context, func: cst.FunctionDef, divisors: set[str]) -> None:
    """`loss_compute(out, batch.trg_y, batch.ntokens)` into `__call__(self, x, y, norm)`,
    which divides by `norm`: the count is the caller's (`self.ntokens = (self.trg_y !=
    pad).data.sum()` in the project's Batch class), each rank's share's. Made the mean
    over the ranks where it is given, at each call that trains."""
    facts, n = ctx.facts, ctx.names
    is_method = facts.enclosing_class(func) is not None
    for param in set(facts.params(func, is_method)) & divisors:
        for site, method in ctx.calls_of(func):
            given = facts.argument_for(site, func, method, param)
            if given is None or without_gradients(facts, site) or not _counted(ctx, given):
                continue
            ctx.define_helper("mean_over_ranks", site, helper_code(n))
            ctx.need("torch", "dist", at=site)
            ctx.plan.rewrite(given, lambda node: expression(
                f"{n.mean_over_ranks}({code_of(node)})"))
            ctx.plan.change(given, "loss.count_divisor",
                            f"`{facts.code(given)}` counts over this rank's share of the batch "
                            f"what the loss divides by (`{param}` of "
                            f"`{func.name.value}`): its mean over the ranks (the whole "
                            "batch's count / WORLD_SIZE), so the ranks' averaged gradients "
                            "are the single process's")


def _counted(ctx: Context, given: cst.BaseExpression) -> bool:
    """Is `given` a count over the batch: a name its function binds to one, or an
    attribute (`batch.ntokens`) that a class of the project sets to one in a method?"""
    facts = ctx.facts
    if isinstance(given, cst.Name):
        func = facts.function(given)
        return func is not None and any(
            _count(ctx, func, a.value) for a in facts.assigned(func, given.value))
    if not isinstance(given, cst.Attribute):
        return False
    attr = given.attr.value
    for assign in facts.assigns:
        func = facts.function(assign)
        if isinstance(assign, cst.Assign) and func is not None and any(
                dotted(t.target) == f"self.{attr}" for t in assign.targets) and _count(
                ctx, func, assign.value):
            return True
    return False


def _divisors(func: cst.FunctionDef) -> set[str]:
    found: set[str] = set()
    for node in walk(func.body):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign) \
                or isinstance(node, cst.BinaryOperation) and isinstance(
                    node.operator, cst.Divide):
            divisor = node.value if isinstance(node, cst.AugAssign) else node.right
            if (name := dotted(divisor)) is not None:
                found.add(name)
    return found


def _count(ctx: Context, func: cst.FunctionDef, value: cst.BaseExpression) -> bool:
    """A count over the batch: a `.sum()` of no dimension in it, or the size of a masked
    selection (`x.size(0)` / `x.numel()` where `x = y[mask]` in the function)."""
    for node in walk(value):
        if isinstance(node, cst.Call) and method_name(node) == "sum" and not positional(node) \
                and not any(a.keyword is not None and a.keyword.value == "dim"
                            for a in node.args):
            return True
    if not (isinstance(value, cst.Call) and method_name(value) in ("size", "numel")):
        return False
    assert isinstance(value.func, cst.Attribute)
    source = dotted(value.func.value)
    return any(isinstance(a, cst.Assign) and ctx.facts.function(a) is func and any(
        dotted(t.target) == source for t in a.targets) and _masked(a.value)
        for a in ctx.facts.assigns)


_RESHAPES = frozenset({"reshape", "view", "flatten", "contiguous", "float", "long", "detach"})


def _masked(value: cst.BaseExpression) -> bool:
    """`y[mask]`, `y[pos_mask, :].reshape(-1, 4)`: indexed by a name (a boolean mask), not
    by numbers, maybe reshaped."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
            value.func.attr.value in _RESHAPES:
        value = value.func.value
    if not isinstance(value, cst.Subscript) or not value.slice:
        return False
    first = value.slice[0].slice
    return isinstance(first, cst.Index) and isinstance(
        first.value, (cst.Name, cst.Attribute, cst.Call, cst.Comparison))
