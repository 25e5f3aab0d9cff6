"""Losses over the whole batch: negatives taken from the other samples, statistics of the
batch.

A contrastive loss whose negatives are the other samples of the batch (SimCLR's NT-Xent,
InfoNCE, SupCon, a CLIP loss, a batch-hard triplet loss) or a loss over statistics of
the batch (Barlow Twins, VICReg) is another loss when each rank computes it over its own
1/WORLD_SIZE of the batch: fewer negatives, statistics of fewer samples, and nothing
fails. Its forms (`batch_forms.py`) are looked for in the project's loss functions (a
name that says so, or a result that feeds a backward) and in its training loops.

Rewrites, where it is exact, the training call of a loss function of the project:

    loss = nt_xent(model(x1), model(x2))
        ->  loss = nt_xent(gather_batch(ddp_model(x1)), gather_batch(ddp_model(x2)))

`gather_batch` (defined with the set-up) concatenates every rank's rows, rank 0's first,
through the differentiable all_gather (`torch.distributed.nn.functional.all_gather`):
every rank computes the loss of the whole global batch, as the single process did, with
the samples in another order (the same for every argument, which a loss over the pairs
of views does not see). The gather's backward sums, for each rank's rows, the gradients
of the WORLD_SIZE equal losses, and the average of the ranks' gradients (DDP's) divides
that back: each step is the single process's.

Exact when the loss function (and the project's functions it calls)
  - reads nothing but what it is given, the modules it imports, constants and the
    hyper-parameters of its object (`self.temperature`): the sizes it uses come from the
    tensors it is given (`z1.shape[0]`), never from a batch size set elsewhere;
  - calls nothing it is given (a model) and sums with no `reduction="sum"` (the loss
    transform would scale it once more);
and its result feeds a backward, and no evaluation goes through the call. The arguments
gathered are those of its parameters with no default (or None): the batches; a tensor
with no dimension and what is not a tensor pass through. Every rank's batch must have
as many rows (DistributedSampler's batches do).

Otherwise, and for the forms in the training loop itself: a warning at the line, with
the fix.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert import batch_forms
from distrun.convert.analysis import Facts, dotted, walk
from distrun.convert.batch_exact import class_of, inexact
from distrun.convert.batch_forms import IN_BATCH_NAME, LOSS_NAME, STATISTICS, Form
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step
from distrun.convert.models import feeds_backward, without_gradients
from distrun.convert.names import Names
from distrun.convert.transforms.count_divisor import divides_by_count
from distrun.convert.transforms.loss import sums_in
from distrun.convert.transforms.memory_bank import gather_memories, memory_sites

_DEPTH = 3
Site = tuple[cst.Call, bool]  # a call of the loss function, and whether it is a method


def plan_batch_losses(ctx: Context) -> None:
    facts = ctx.facts
    groups: dict[cst.CSTNode, list[Form]] = {}
    context: dict[int, bool] = {}
    memories = {dotted(site.targets[0].target) for site, _ in memory_sites(ctx)}
    for node in list(facts.parent):
        form = batch_forms.form_of(facts, node)
        if form is not None and form.kind == batch_forms.RATIO and divides_by_count(ctx, node):
            continue  # (a masked mean: its count made whole by the loss transform)
        if form is None or without_gradients(facts, node) or any(
                isinstance(n, cst.Name) and n.value in memories for n in walk(node)):
            continue  # (against a memory of past batches, gathered from every rank)
        func = facts.function(node)
        if func is not None and id(func) not in context:
            context[id(func)] = _loss_function(ctx, func)
        if (func is None or not context[id(func)]) and (
                form.kind == batch_forms.RATIO or not _in_training_loop(facts, node)):
            continue  # (a ratio of sums: in a loss function only, not a metric's)
        where = func if func is not None else facts.top_level_statement(node)
        groups.setdefault(where, []).append(form)
    gathered: set[int] = set()  # calls whose batches are gathered (once, whatever leads there)
    for where, forms in groups.items():
        _plan(ctx, where, forms, gathered)
    _by_name(ctx, set(groups))
    gather_memories(ctx)


TRANSFORM = Transform("batch_loss", plan_batch_losses)


def _loss_function(ctx: Context, func: cst.FunctionDef) -> bool:
    """Is `func` a loss: named so (or a method of a class named so), or its result fed
    to a backward?"""
    cls = class_of(ctx.facts, func)
    if LOSS_NAME.search(func.name.value) or (cls is not None and LOSS_NAME.search(
            cls.name.value)):
        return True
    return any(feeds_backward(ctx.facts, site) for site, _ in _sites(ctx, func))


def _trains_here(facts: Facts, container: cst.CSTNode) -> bool:
    return any(is_backward(c) or is_optimizer_step(c) for c in facts.calls_in(container))


def _in_training_loop(facts: Facts, node: cst.CSTNode) -> bool:
    return any(_trains_here(facts, loop.body) for loop in facts.enclosing_loops(node))


def _plan(ctx: Context, where: cst.CSTNode, forms: list[Form], gathered: set[int]) -> None:
    facts = ctx.facts
    func = where if isinstance(where, cst.FunctionDef) else None
    if func is None or _trains_here(facts, func):
        _warn(ctx, forms[0], "it is computed in the training code itself")
        return
    root, sites, reason = _training_calls(ctx, func)
    if reason is None and not sites or not sites and all(
            f.kind == batch_forms.RATIO for f in forms):
        return  # (a ratio no training calls: a metric, or a loss the script never uses)
    reason = reason or inexact(ctx, root, 0, set())
    for site, _ in sites:
        if reason is None and any(arg.star for arg in site.args):
            reason = f"`{facts.code(site.func)}` is called with *args or **kwargs"
        stmt = facts.statement(site)
        summed = sums_in(ctx, stmt, 0) if stmt is not None and reason is None else None
        if summed is not None:
            reason = f"`{facts.code(summed)}` sums over the batch beside it"
    if reason is not None:
        _warn(ctx, forms[0], reason)
        return
    for site, is_method in sites:
        if id(site) not in gathered:
            gathered.add(id(site))
            _gather_at(ctx, site, root, is_method, forms[0])


def _gather_at(ctx: Context, site: cst.Call, func: cst.FunctionDef, is_method: bool,
               form: Form) -> None:
    facts, n = ctx.facts, ctx.names
    gathered = []
    for param in _batch_params(func, is_method):
        arg = facts.argument_for(site, func, is_method, param)
        if arg is None or isinstance(arg, (cst.BaseNumber, cst.BaseString)) or \
                dotted(arg) in ("None", "True", "False"):
            continue
        gathered.append(f"`{facts.code(arg)}`")
        ctx.plan.rewrite(arg, lambda node: expression(f"{n.gather_batch}({code_of(node)})"))
    if not gathered:
        return
    ctx.define_helper("gather_batch", site, helper_code(n))
    ctx.need("torch", "dist", at=site)
    where = f"`{_short(facts, form.node)}`, line {facts.line(form.node)}"
    ctx.plan.change(site, "batch_loss.gather",
                    f"`{facts.code(site.func)}(...)` computes {form.kind} ({where}): "
                    f"{', '.join(gathered)} gathered from every rank first "
                    f"(`{n.gather_batch}`: the differentiable all_gather), so every rank "
                    "computes the loss of the whole global batch, as one process did; "
                    "the average of the ranks' gradients gives one process's step")


def _warn(ctx: Context, form: Form, reason: str) -> None:
    what = ("statistics of fewer samples" if form.kind == STATISTICS else
            "a ratio of this rank's sums, whose average is not the whole batch's ratio"
            if form.kind == batch_forms.RATIO else "fewer negatives than one process")
    ctx.plan.finding(form.node, "batch_loss.per_rank",
                     f"`{_short(ctx.facts, form.node)}` is {form.kind}: under DDP each rank "
                     f"computes it over its own 1/WORLD_SIZE of the batch ({what}), and "
                     f"nothing says so; not rewritten: {reason}", _FIX)


_FIX = ("gather the features from every rank before it, with the differentiable "
        "all_gather: `z = torch.cat(torch.distributed.nn.functional.all_gather(z))`; every "
        "rank then computes the loss of the whole batch (its sizes from `z.shape[0]`, not "
        "from a batch size of the arguments), and the average of the ranks' gradients gives "
        "one process's step. If the batch stacks the views of each sample (`torch.cat(views, "
        "dim=0)` before the model, positives found by position), gather view by view, or the "
        "positives pair other ranks' samples: `z = torch.cat([torch.cat(all_gather(v)) for v "
        "in z.chunk(n_views)])`")


def _short(facts: Facts, node: cst.CSTNode) -> str:
    code = " ".join(facts.code(node).split())
    return code if len(code) <= 60 else code[:57] + "..."


# -- where the loss is called ---------------------------------------------------------


def _sites(ctx: Context, func: cst.FunctionDef) -> list[Site]:
    return ctx.calls_of(func)


def _training_calls(ctx: Context, func: cst.FunctionDef
                    ) -> tuple[cst.FunctionDef, list[Site], str | None]:
    """The loss function whose calls feed a backward (`func`, or the one of the project's
    loss functions that calls it), those calls, or why none can be gathered (no calls
    and no reason: it only evaluates, under no_grad)."""
    facts = ctx.facts
    current = func
    for _ in range(_DEPTH):
        sites = _sites(ctx, current)
        if sites and all(without_gradients(facts, s) for s, _ in sites):
            return current, [], None  # evaluation only, on every rank's whole set
        verdicts = [(site, method, _feeds(ctx, site)) for site, method in sites]
        mixed = next((s for s, _, v in verdicts if v is None), None)
        if mixed is not None:
            holder = facts.function(mixed)
            name = holder.name.value if holder is not None else "?"
            return current, [], (f"`{name}`, which calls it, also runs where no backward "
                                 "follows (an evaluation would see every batch repeated)")
        training = [(s, m) for s, m, v in verdicts if v]
        if training:
            return current, training, None
        callers = {id(f): f for s, _ in sites if (f := facts.function(s)) is not None}
        if len(callers) != 1:
            break
        caller = next(iter(callers.values()))
        if _trains_here(facts, caller) or not _loss_function(ctx, caller):
            break
        current = caller
    return func, [], f"no call of `{func.name.value}` that feeds a backward was found"


def _feeds(ctx: Context, site: cst.Call) -> bool | None:
    """Does the result of `site` go to a backward (directly, or returned by a function
    whose calls all do)? None: to a backward from some calls of its function, not all."""
    facts = ctx.facts
    if without_gradients(facts, site):
        return False
    if feeds_backward(facts, site):
        return True
    holder = facts.function(site)
    if holder is None or not _returned(facts, site, holder):
        return False
    fed = [not without_gradients(facts, s) and feeds_backward(facts, s)
           for s, _ in _sites(ctx, holder)]
    if fed and all(fed):
        return True
    return None if any(fed) else False


def _returned(facts: Facts, site: cst.Call, holder: cst.FunctionDef) -> bool:
    """Is the value of `site` what `holder` returns (`return f(...)`, or `x = f(...)`
    then `return x`)?"""
    stmt = facts.statement(site)
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    if any(isinstance(s, cst.Return) for s in stmt.body):
        return True
    names = {dotted(t.target) for s in stmt.body if isinstance(s, cst.Assign) for t in s.targets}
    return any(r.value is not None and dotted(r.value) in names
               for r in facts.returns if facts.function(r) is holder)


def _batch_params(func: cst.FunctionDef, is_method: bool) -> list[str]:
    """The parameters given the batches: those with no default, or None."""
    params = [*func.params.posonly_params, *func.params.params][1 if is_method else 0:]
    return [p.name.value for p in params
            if p.default is None or dotted(p.default) == "None"]


# -- names that say so --------------------------------------------------------------


def _by_name(ctx: Context, seen: set[cst.CSTNode]) -> None:
    """A loss whose name says it takes its negatives from the batch, where no form was
    recognised: the project's own (when called), or a library's."""
    facts = ctx.facts
    reported: set[str] = set()
    for call in facts.calls:
        name = facts.call_name(call) or ""
        short = name.rsplit(".", 1)[-1]
        if not IN_BATCH_NAME.search(short) or short in reported:
            continue
        defined = facts.local_definition(call)
        head = (dotted(call.func) or "").split(".")[0]
        if defined is None and head not in facts.module_of(call).imports:
            continue  # an object of the script's (`nt_xent = NTXentLoss(...)`): its class
        if defined is not None and (defined in seen or _has_form(ctx, defined, seen)):
            continue
        reported.add(short)
        node: cst.CSTNode = defined if defined is not None else call
        own = " of the project" if defined is not None else f" (`{name}`)"
        ctx.plan.finding(node, "batch_loss.per_rank",
                         f"`{short}`{own} takes its negatives (or its statistics) from the "
                         "batch, by its name: under DDP each rank computes it over its own "
                         "1/WORLD_SIZE of the batch, and nothing says so", _FIX)


def _has_form(ctx: Context, defined: cst.CSTNode, seen: set[cst.CSTNode]) -> bool:
    return any(isinstance(node, cst.FunctionDef) and ctx.facts.inside(node, defined)
               for node in seen)


def helper_code(n: Names) -> str:
    """The definition of the gather, for the modules that call a loss with it."""
    return f'''

def {n.gather_batch}(x):
    """distrun: the rows of `x` from every rank, rank 0's first, differentiable: a loss over
    the whole batch (its negatives, its statistics) sees the global batch, as one process
    did. The backward sums over the ranks the gradients of each rank's rows (WORLD_SIZE
    equal losses), which the average of the ranks' gradients divides back."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or not {n.dist}.is_initialized():
        return x

    class Rows(torch.autograd.Function):
        @staticmethod
        def forward(ctx, rows):
            every = [torch.empty_like(rows) for _ in range({n.dist}.get_world_size())]
            {n.dist}.all_gather(every, rows)
            return torch.cat(every)

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            {n.dist}.all_reduce(grad)
            return grad.chunk({n.dist}.get_world_size())[{n.dist}.get_rank()]

    return Rows.apply(x.contiguous())
'''
