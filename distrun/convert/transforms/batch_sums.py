"""Losses summed over the batch by `.sum()` (part of the loss transform).

    loss = ((model(x) - y) ** 2).sum()           ->  loss = batch_sum(((model(x) - y) ** 2).sum())
    logprob = F.logsigmoid(pred).sum()           ->  logprob = batch_sum(F.logsigmoid(pred).sum())
    return -logprob + penalty * regularization       (bohyunshin/recommender's BPR loss, a
                                                      VAE's KL term, a sum of squares)

A tensor's `.sum()` (or `torch.sum(t)`) of no dimension, over values computed from the
batch, is a sum over the batch: each rank sums its 1/WORLD_SIZE share, DDP averages the
ranks' gradients, and every step is 1/WORLD_SIZE of the single process's, silently. The
sum itself is scaled by WORLD_SIZE while it is differentiated (`batch_sum`): the average
of the ranks' gradients is then the gradient of the whole batch's sum, and a term beside
it that does not grow with the batch (an L2 penalty on the weights) keeps its own weight;
scaling the backward instead would multiply that term too. Under `torch.no_grad()` (an
evaluation) the sum is left as it is. The value printed or logged by a rank is its share
x WORLD_SIZE, whose mean over the ranks is the whole batch's sum.

Taken: a sum whose operand comes from the batch (the names the training loop's `for`
binds, or `next()` draws, and what is computed from them: the model's output), in the
loss's value, in what the names of that value were assigned, or in what a function of the
project called there returns (3 calls deep, the batch followed through its arguments).
Not taken: a sum that is divided afterwards (a mean, or count_divisor.py's), a sum of
normalised weights (`(w / w.sum() * loss).sum()`), a sum in a function whose loss sees
the whole batch (batch_loss.py gathers it), a sum of no batch value (a penalty on the
weights).
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert import batch_forms
from distrun.convert.analysis import (
    Facts,
    Scope,
    dotted,
    is_static,
    keyword,
    positional,
    string_value,
    walk,
)
from distrun.convert.batch_forms import LOSS_NAME
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.names import Names
from distrun.convert.transforms.loss_flow import arith, divided

_DEPTH = 3
# parameters of a training step that are not its batch
_NOT_BATCH = re.compile(r"^(self|cls|model|net|network|module|optimi[sz]er|opt|criterion|"
                        r"loss_fn|loss_func|args|opt_args|config|cfg|hparams|device|epoch|"
                        r"step|iteration|it|scaler|writer|logger)$")


def batch_sums(ctx: Context, backward: cst.Call, loss: str) -> list[cst.Call]:
    """The `.sum()` calls over the batch that `loss` (whose backward is `backward`) adds
    up, in its scope or in the functions it calls."""
    facts = ctx.facts
    _AUG.clear()
    if keyword(backward, "inputs") is not None:
        return []  # a gradient taken for other tensors (per-sample gradients, an input's)
    scope = facts.scope(backward)
    seeds, within = _seeds(facts, backward)
    batch = _taint(facts, scope, seeds, within)
    if not batch:
        return []
    values = [a.value for a in _assigns(facts, scope) if facts.line(a) <= facts.line(backward)
              and any(dotted(t) == loss for t in _targets(a))]
    found: list[cst.Call] = []
    seen: set[int] = set()
    for value in values:
        _sums(ctx, value, scope, batch, 0, found, seen)
    return found


def scale_sums(ctx: Context, backward: cst.Call, loss: str, sums: list[cst.Call]) -> None:
    facts, n = ctx.facts, ctx.names
    for call in sums:
        ctx.need("torch", "dist", at=call)
        ctx.define_helper("batch_sum", call, helper_code(n))
        ctx.plan.rewrite(call, lambda node: expression(f"{n.batch_sum}({code_of(node)})"))
    said = ", ".join(f"`{' '.join(facts.code(s).split())}` ({facts.module_of(s).path}:"
                     f"{facts.line(s)})" for s in sums)
    ctx.plan.change(backward, "loss.batch_sum",
                    f"`{loss}` sums over the batch: {said}; each sum is scaled by "
                    f"{n.world_size} while it is differentiated (`{n.batch_sum}`), since DDP "
                    "averages the ranks' gradients: each step stays the single process's, "
                    "and a term beside it that does not grow with the batch keeps its weight")


def _seeds(facts: Facts, backward: cst.Call) -> tuple[set[str], cst.CSTNode | None]:
    """The batch's names where `backward` runs, and the loop they are bound in: what the
    enclosing `for` loops over data bind and `next()` draws; with neither, the
    parameters of its function (a step given its batch)."""
    names: set[str] = set()
    within: cst.CSTNode | None = None
    for loop in facts.enclosing_loops(backward):
        if isinstance(loop, cst.For) and not _counts(loop.iter):
            names |= _names_in(loop.target)
            within = loop
    scope = facts.scope(backward)
    for assign in _assigns(facts, scope):
        value = assign.value
        if isinstance(value, cst.Call) and dotted(value.func) == "next" and (
                within is None or facts.inside(assign, within)):
            for target in _targets(assign):
                names |= _names_in(target)
    func = facts.function(backward)
    if not names and func is not None:
        names = {p.name.value for p in func.params.params if not _NOT_BATCH.match(
            p.name.value)}
    if within is None:  # drawn by next() in a step loop: from that loop on
        within = next((loop for loop in facts.enclosing_loops(backward)), None)
    return names, within


def memory_rows(facts: Facts, node: cst.CSTNode, rows: cst.BaseExpression) -> bool:
    """Is `rows`, at `node` in a loop over data, made from the batch (one row a sample)?"""
    _AUG.clear()
    seeds, within = _seeds(facts, node)  # type: ignore[arg-type]
    if within is None:
        return False
    return _rows(rows, _taint(facts, facts.scope(node), seeds, within))


def _counts(over: cst.BaseExpression) -> bool:
    """`range(epochs)`, `enumerate(range(n))`, `tqdm(range(n))`: a loop over numbers."""
    while isinstance(over, cst.Call) and over.args and dotted(over.func) != "range":
        over = over.args[0].value
    return isinstance(over, cst.Call) and dotted(over.func) == "range"


def _taint(facts: Facts, scope: Scope, seeds: set[str], within: cst.CSTNode | None = None
           ) -> set[str]:
    """`seeds` and every name of `scope` (of the loop `within` where given: what was
    made before the batch came holds none of it) assigned from them, to a fixed point."""
    tainted = set(seeds)
    assigns = [a for a in _assigns(facts, scope) if within is None or facts.inside(a, within)]
    for _ in range(6):
        before = len(tainted)
        for assign in assigns:
            if _rows(assign.value, tainted) and not _gradient(assign.value):
                for target in _targets(assign):
                    tainted |= _names_in(target)
        if len(tainted) == before:
            break
    return tainted


def _sums(ctx: Context, node: cst.CSTNode, scope: Scope, batch: set[str], depth: int,
          found: list[cst.Call], seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    facts = ctx.facts
    calls, names = arith(node)
    for call in calls:
        operand = _summed(call)
        if operand is not None:
            if _rows(operand, batch) and not divided(facts, call) and not \
                    _normalised(facts, operand, scope, batch) and not _gathered(facts, call) \
                    and not _chosen_reduction(facts, call) \
                    and not _names_in(operand) & _gradients(facts, scope) \
                    and call not in found:
                found.append(call)
            continue
        if depth >= _DEPTH:
            continue
        callee = ctx.flow.callee(call)
        for func, is_method in [callee] if callee is not None else _held(facts, call):
            inner = _taint(facts, func, _bound(call, func, is_method, batch))
            for ret in facts.returns if inner else ():
                if ret.value is not None and facts.function(ret) is func:
                    _sums(ctx, ret.value, func, inner, depth + 1, found, seen)
    for name in names & batch:  # what the value's names were assigned
        for assign in _assigns(facts, scope):
            if any(name in _names_in(t) for t in _targets(assign)):
                _sums(ctx, assign.value, scope, batch, depth, found, seen)


def _held(facts: Facts, call: cst.Call) -> list[tuple[cst.FunctionDef, bool]]:
    """The project's functions an attribute called as `self.loss(...)` may hold
    (`self.loss = bpr_loss`, one per branch that sets it); for `obj.method(...)` on an
    object of no known class, the project's methods of that name (3 at most)."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return []
    if dotted(func.value) != "self":  # an object the analysis cannot type (a model class
        # chosen by name through importlib): the project's methods of that name
        methods = [(f, True) for f in facts.function_defs if f.name.value == func.attr.value
                   and facts.enclosing_class(f) is not None]
        return methods if len(methods) <= 3 else []
    held = []
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or not any(
                dotted(t.target) == f"self.{func.attr.value}" for t in assign.targets):
            continue
        name = facts.qualname(assign.value) if isinstance(assign.value, (
            cst.Name, cst.Attribute)) else None
        if name is None:
            continue
        found = facts.module_of(assign).functions.get(name) if "." not in name else \
            facts.definition(name)
        if isinstance(found, cst.FunctionDef):
            held.append((found, False))
    return held


def _summed(call: cst.Call) -> cst.BaseExpression | None:
    """The operand of `x.sum()` or `torch.sum(x)` of no dimension."""
    func = call.func
    if keyword(call, "dim") is not None or keyword(call, "axis") is not None:
        return None
    if isinstance(func, cst.Attribute) and func.attr.value == "sum" and not call.args:
        return func.value
    if dotted(func) == "torch.sum" and len(positional(call)) == 1:
        return call.args[0].value
    return None


def _normalised(facts: Facts, operand: cst.BaseExpression, scope: Scope, batch: set[str]
                ) -> bool:
    """Weights divided by something of the batch (`w / w.sum()`, class-balanced `1. /
    counts[y]`), in the operand or a name of it assigned in `scope`: a weighted mean, no
    sum."""
    nodes: list[cst.CSTNode] = [operand]
    names = _names_in(operand)
    nodes += [a.value for a in _assigns(facts, scope)
              if any(_names_in(t) & names for t in _targets(a))]
    return any(isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide)
               and (".sum(" in code_of(node.right) or _names_in(node.right) & batch)
               for part in nodes for node in walk(part))


def _gradients(facts: Facts, scope: Scope) -> set[str]:
    """The names of `scope` made from gradients (`dl = torch.autograd.grad(...)[0]`,
    `gw.append(torch.norm(dl))`, `gw = torch.stack(gw)`: GradNorm's per-task norms): a
    sum of them is over tasks or parameters, not over the batch."""
    made: set[str] = set()
    assigns = _assigns(facts, scope)
    appends = [c for c in facts.calls_in(scope) if isinstance(c.func, cst.Attribute)
               and c.func.attr.value in ("append", "extend") and facts.scope(c) is scope]
    for _ in range(4):
        before = len(made)
        for assign in assigns:
            if _gradient(assign.value) or _names_in(assign.value) & made:
                for target in _targets(assign):
                    made |= _names_in(target)
        for call in appends:
            if any(_names_in(a.value) & made or _gradient(a.value) for a in call.args):
                made |= _names_in(call.func.value)  # type: ignore[attr-defined]
        if len(made) == before:
            break
    return made


def _gradient(value: cst.BaseExpression) -> bool:
    """`torch.autograd.grad(...)` (or `[0]` of it): a gradient, whose size does not grow
    with the batch."""
    if isinstance(value, cst.Subscript):
        value = value.value
    return isinstance(value, cst.Call) and (dotted(value.func) or "").endswith("autograd.grad")


def _gathered(facts: Facts, call: cst.Call) -> bool:
    """In a function whose loss sees the whole batch (batch_loss.py gathers its rows):
    its sum is the whole batch's already."""
    func = facts.function(call)
    return func is not None and any(batch_forms.form_of(facts, node) is not None
                                    for node in walk(func))


_REDUCTIONS = frozenset({"mean", "sum", "norm", "item", "std", "var", "max", "min", "prod",
                         "logsumexp", "all", "any", "numel"})
_LOSSES = frozenset({"cross_entropy", "binary_cross_entropy", "nll_loss", "kl_div",
                     "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "huber_loss",
                     "smooth_l1_loss", "ctc_loss", "margin_ranking_loss", "cosine_embedding_loss"})


def _rows(node: cst.CSTNode, batch: set[str]) -> bool:
    """Does `node` still hold one value per sample of the batch (rows of a batch name)?
    A full reduction (`x.mean()`, `torch.norm(x)`) or a loss of the default reduction
    (`F.mse_loss(out, y)`, `criterion(out, y)`) leaves none: a sum over a stack of task
    losses is over the tasks (Kendall's uncertainty weighting, GradNorm)."""
    if isinstance(node, cst.Name):
        return node.value in batch
    if isinstance(node, (cst.Attribute, cst.Subscript)):
        return _rows(node.value, batch)
    if isinstance(node, cst.Call):
        func = node.func
        last = (dotted(func) or "").rpartition(".")[2]
        dims = [a for a in node.args if a.keyword is None or a.keyword.value in ("dim", "axis")]
        method = isinstance(func, cst.Attribute)
        if last in _REDUCTIONS and (method and not dims or not method and len(dims) <= 1):
            return False  # reduced whole (with no dimension named)
        reduction = keyword(node, "reduction")
        if (last in _LOSSES or LOSS_NAME.search(last)) and (
                reduction is None or string_value(reduction.value) != "none"):
            return False
        parts = [a.value for a in node.args] + ([func.value] if isinstance(
            func, cst.Attribute) else [])
        return any(_rows(p, batch) for p in parts)
    if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation, cst.IfExp, cst.List,
                         cst.Tuple, cst.Element, cst.Arg, cst.Comparison)):
        return any(_rows(child, batch) for child in node.children)
    return bool(_names_in(node) & batch)


def _chosen_reduction(facts: Facts, call: cst.Call) -> bool:
    """In the branch of a loss that sums when asked (`loss.sum() if reduction == "sum"
    else loss.mean()`): a call asking for it has `reduction="sum"` (loss.py scales it)."""
    for up in facts.ancestors(call):
        test = up.test if isinstance(up, (cst.IfExp, cst.If)) else None
        if test is not None and any(isinstance(n, cst.SimpleString) and n.value.strip(
                "'\"") == "sum" for n in walk(test)):
            return True
        if isinstance(up, cst.FunctionDef):
            return False
    return False


def _bound(call: cst.Call, func: cst.FunctionDef, is_method: bool, batch: set[str]
           ) -> set[str]:
    """The parameters of `func` that `call` gives a batch value."""
    params = [p.name.value for p in func.params.params]
    if is_method and params and not is_static(func) and not (isinstance(call.func, cst.Attribute)
                                     and dotted(call.func.value) in params[:1]):
        params = params[1:]
    bound: set[str] = set()
    for index, arg in enumerate(call.args):
        if arg.star or not _names_in(arg.value) & batch:
            continue
        if arg.keyword is not None:
            bound.add(arg.keyword.value)
        elif index < len(params):
            bound.add(params[index])
    return bound


_AUG: dict[int, list[cst.Assign | cst.AugAssign]] = {}  # one backward's scopes, read once


def _assigns(facts: Facts, scope: Scope) -> list[cst.Assign | cst.AugAssign]:
    if id(scope) not in _AUG:
        found: list[cst.Assign | cst.AugAssign] = [
            a for a in facts.assigns if isinstance(a, cst.Assign) and facts.scope(a) is scope]
        found += [node for node in walk(scope) if isinstance(node, cst.AugAssign)
                  and facts.scope(node) is scope]
        _AUG[id(scope)] = found
    return _AUG[id(scope)]


def _targets(assign: cst.Assign | cst.AugAssign) -> list[cst.BaseExpression]:
    if isinstance(assign, cst.AugAssign):
        return [assign.target]
    return [t.target for t in assign.targets]


def _names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def helper_code(n: Names) -> str:
    return f'''

def {n.batch_sum}(total):
    """distrun: a sum over the rank's share of the batch, times the number of ranks while
    it is differentiated: DDP averages the ranks' gradients, and the average of these is
    the gradient of the sum over the whole batch, as on one process. Left as it is under
    torch.no_grad() (an evaluation)."""
    if isinstance(total, torch.Tensor) and total.requires_grad and \\
            {n.dist}.is_initialized():
        return total * {n.dist}.get_world_size()
    return total
'''
