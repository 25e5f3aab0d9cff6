"""Training metrics summed over a sharded loader's batches and read after the loop (part of
the data transform).

    running_loss += loss.item()                 each rank sums its own share of every batch:
    correct += (pred == y).sum().item()         rank 0 would print, log and return its
    total += y.size(0)                          share's loss and accuracy as the training's
    <after the loop>   the sums all-reduced, each the way its terms add up

Every rank runs the same number of batches (the sampler pads the shares to one length),
so the end of the loop is a point every rank reaches. A sum of batch means (a loss whose
criterion averages over the batch, `.mean()`, `correct / y.size(0)`) is averaged over the
ranks: the mean of equal shares' means is the global batch's mean. A sum of counts or of
per-sample sums (`.sum()`, `y.size(0)`, `len(y)`, `loss.item() * x.size(0)`, a loss that
sums over the batch) is summed. A counter (`+= 1`) is the same on every rank. The values
printed, logged and returned after the loop are then the single process's.

Won't: a sum with a term of no known kind, or over a loop whose loader is sharded on some
paths only (a helper that also evaluates with it): reported (info), rank 0's share. Sums
printed inside the loop (every N batches) stay rank 0's own.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, positional, walk
from distrun.convert.build import statements
from distrun.convert.context import Context
from distrun.convert.draws import drawn_loops
from distrun.convert.idioms import (
    assigns_inside,
    is_backward,
    method_name,
    origin_names,
    receiver,
    train_loops,
)
from distrun.convert.transforms.evaluation import in_with, sums_before
from distrun.convert.transforms.gathered_lists import gather_code, grown_lists
from distrun.convert.transforms.loader_names import construction_names
from distrun.convert.transforms.loss import sum_reduction
from distrun.convert.transforms.meters import meter_holders, meters_code, shown

Body = cst.For | cst.FunctionDef  # where a term's names are bound: the loop, or a function
_PASS = frozenset({"item", "detach", "cpu", "clone", "float", "double", "data"})
_NUMBER = frozenset({"item", "size", "numel"})
_DEPTH = 4


def reduce_train_metrics(ctx: Context, sharded: set[str], loaders: list[cst.Call]) -> None:
    facts = ctx.facts
    whole = {n for call in loaders for n in construction_names(facts, call)} - sharded
    by_loop: dict[cst.For, set[str]] = {}  # a loop over several loaders: once, all of them
    for found in train_loops(facts, ctx.flow) + drawn_loops(facts, ctx.flow):
        by_loop.setdefault(found.loop, set()).update(
            origin_names(facts, found.loader, facts.scope(found.loop), 0))
    for loop, origins in by_loop.items():
        loader = " and ".join(sorted(origins))
        read = [s for s in sums_before(facts, loop, tensors=True) if _read_after(facts, loop, s)]
        gathered = [s for s in grown_lists(facts, loop) if _read_after(facts, loop, s)]
        lists = [s for s in _lists_before(facts, loop) if _read_after(facts, loop, s)
                 and s not in gathered]
        meters = meter_holders(ctx, loop, lambda s, loop=loop: _read_after(facts, loop, s))
        if not read + lists + meters + gathered or not origins & sharded:
            continue
        kinds = {s: _sum_kind(ctx, loop, s) for s in read}
        unknown = [s for s, k in kinds.items() if k is None] + [
            s for s in lists if not _batch_means(ctx, loop, s)]
        if origins & whole or unknown:
            why = (f"`{loader}` may also be a loader left whole"
                   if origins & whole else
                   f"what {', '.join(f'`{s}`' for s in unknown)} add up is of no known kind"
                   " (a list: batch means only)")
            kept = read + lists + gathered + [shown(m) for m in meters]
            ctx.plan.finding(loop, "data.train_metrics_shard",
                             f"{', '.join(kept)} summed or kept over this training "
                             f"loop and read after it: rank 0's share of each batch ({why})",
                             "all-reduce them after the loop (`dist.all_reduce`): summed "
                             "for counts, averaged over the ranks for batch means",
                             severity="info")
            continue
        _reduce_after(ctx, loop, {s: k for s, k in kinds.items() if k is not None}, lists,
                      meters, gathered)


def _lists_before(facts: Facts, loop: cst.For) -> list[str]:
    """Names set to `[]` before `loop` (in its function) and `.append`-ed inside it."""
    appended = {receiver(c) for c in facts.calls_in(loop.body) if method_name(c) == "append"}
    scope, start = facts.scope(loop), facts.line(loop)
    found: list[str] = []
    for assign in facts.assigns:
        if isinstance(assign, cst.Assign) and facts.scope(assign) is scope and facts.line(
                assign) < start and isinstance(assign.value, cst.List) and not \
                assign.value.elements and facts.module_of(assign) is facts.module_of(loop):
            for target in assign.targets:
                name = dotted(target.target)
                if name is not None and name in appended and "." not in name \
                        and name not in found:
                    found.append(name)
    return found


def _batch_means(ctx: Context, loop: cst.For, name: str) -> bool:
    """Is every value appended to `name` in `loop` a Python number of a batch mean?"""
    terms = [c.args[0].value for c in ctx.facts.calls_in(loop.body)
             if method_name(c) == "append" and receiver(c) == name and len(c.args) == 1]
    kinds = [_kind(ctx, loop, term, 0) for term in terms]
    return bool(kinds) and all(k is not None and k[1] and k[0] in ("mean", "same")
                               for k in kinds)


def _read_after(facts: Facts, loop: cst.For, name: str) -> bool:
    """Is `name` read after `loop` in its function, and never in a test there (`if loss >
    min(history):` may compare it with a rank's own value: agreed.py's, left as it is)?"""
    end = facts.spans[loop][1][0]
    scope, module = facts.scope(loop), facts.module_of(loop)
    read = False
    for node in facts.names:
        if node.value != name or facts.line(node) <= end or facts.scope(node) is not scope:
            continue
        if facts.module_of(node) is not module:
            continue
        parent = facts.parent.get(node)
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) and parent.target is node:
            continue
        if _in_a_test(facts, node):
            return False
        read = True
    return read


def _in_a_test(facts: Facts, node: cst.CSTNode) -> bool:
    child = node
    for anc in facts.ancestors(node):
        if isinstance(anc, (cst.If, cst.While, cst.IfExp)) and anc.test is child:
            return True
        if isinstance(anc, (cst.BaseStatement, cst.FunctionDef)):
            return False
        child = anc
    return False


def _sum_kind(ctx: Context, loop: cst.For, name: str) -> tuple[str, bool] | None:
    """("mean"|"sum"|"same", whether every term is a Python number) for the `+=` of
    `name` in `loop`; None when a term is of no known kind."""
    kinds, numbers = set(), True
    for node in _adds(ctx.facts, loop, name):
        got = _kind(ctx, loop, node.value, 0)
        if got is None:
            return None
        kinds.add(got[0])
        numbers = numbers and got[1]
    kinds.discard("same")
    if len(kinds) > 1:
        return None
    return (kinds.pop() if kinds else "same"), numbers


def _adds(facts: Facts, loop: cst.For, name: str) -> list[cst.AugAssign]:
    return [node for node in walk(loop.body) if isinstance(node, cst.AugAssign)
            and isinstance(node.operator, cst.AddAssign) and dotted(node.target) == name]


def _kind(ctx: Context, loop: Body, expr: cst.BaseExpression, depth: int
          ) -> tuple[str, bool] | None:
    """What one term adds: ("mean", is_number) for a batch mean, ("sum", ...) for a count
    or a sum over the batch's samples, ("same", ...) for a constant."""
    if depth > _DEPTH:
        return None
    if isinstance(expr, (cst.Integer, cst.Float)):
        return "same", True
    if isinstance(expr, cst.Name):
        return _name_kind(ctx, loop, expr, depth)
    if isinstance(expr, cst.Attribute) and expr.attr.value in _PASS:
        return _kind(ctx, loop, expr.value, depth + 1)
    if isinstance(expr, cst.Subscript):
        return _subscript_kind(ctx, loop, expr, depth)
    if isinstance(expr, cst.Call):
        return _call_kind(ctx, loop, expr, depth)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _kind(ctx, loop, expr.expression, depth + 1)
    if isinstance(expr, cst.Attribute) and _constant(ctx.facts, loop, expr):
        return "same", True  # `args.gamma * gp`: a setting, the same on every rank
    if isinstance(expr, cst.BinaryOperation):
        left = _kind(ctx, loop, expr.left, depth + 1)
        right = _kind(ctx, loop, expr.right, depth + 1)
        if left is None or right is None:
            return None
        number = left[1] and right[1]
        pair = {left[0], right[0]}
        if isinstance(expr.operator, cst.Multiply):
            if "same" in pair:
                return (pair - {"same"} or {"same"}).pop(), number
            return ("sum", number) if pair == {"mean", "sum"} else None
        if isinstance(expr.operator, cst.Divide):
            if right[0] == "same":
                return left[0], number
            return ("mean", number) if pair == {"sum"} else None
        if isinstance(expr.operator, (cst.Add, cst.Subtract)) and len(pair - {"same"}) <= 1:
            return (pair - {"same"} or {"same"}).pop(), number
    return None


def _constant(facts: Facts, loop: Body, expr: cst.Attribute) -> bool:
    """`args.gamma`, `self.alpha`: an attribute of a name the loop does not bind, itself
    never assigned in the loop."""
    root: cst.BaseExpression = expr
    while isinstance(root, cst.Attribute):
        root = root.value
    code = dotted(expr)
    if not isinstance(root, cst.Name) or code is None:
        return False
    body = loop.body
    return not assigns_inside(facts, body, root.value) and not assigns_inside(
        facts, body, code) and not (isinstance(loop, cst.For) and any(
            isinstance(n, cst.Name) and n.value == root.value for n in walk(loop.target)))


def _subscript_kind(ctx: Context, loop: Body, expr: cst.Subscript, depth: int
                    ) -> tuple[str, bool] | None:
    index = expr.slice[0].slice if len(expr.slice) == 1 else None
    first = isinstance(index, cst.Index) and isinstance(index.value, cst.Integer) and \
        index.value.value == "0"
    if not first:
        return None
    value = expr.value
    if isinstance(value, cst.Attribute) and value.attr.value == "shape":
        return "sum", True  # `y.shape[0]`: the batch's size
    if isinstance(value, cst.Attribute) and value.attr.value == "data":
        got = _kind(ctx, loop, value.value, depth + 1)  # `loss.data[0]` (old PyTorch)
        return (got[0], True) if got else None
    return None


def _call_kind(ctx: Context, loop: Body, call: cst.Call, depth: int
               ) -> tuple[str, bool] | None:
    facts = ctx.facts
    name = facts.call_name(call) or ""
    args = positional(call)
    if name in ("float", "int") and len(args) == 1:
        got = _kind(ctx, loop, args[0].value, depth + 1)
        return (got[0], True) if got else None
    if name == "len" and len(args) == 1:
        return "sum", True
    if name in ("torch.sum", "torch.mean") and len(call.args) == 1:
        return name[6:], False
    found = ctx.flow.callee(call)
    if found is not None and found[0] is not loop:  # `step_loss = train_step(x, y)`
        returns = [r.value for r in facts.returns
                   if facts.function(r) is found[0] and r.value is not None]
        kinds = {_kind(ctx, found[0], value, depth + 1) for value in returns}
        return kinds.pop() if len(kinds) == 1 else None
    if not isinstance(call.func, cst.Attribute):
        return None
    method = call.func.attr.value
    if method in ("sum", "mean", "numel") and not call.args:
        return ("mean" if method == "mean" else "sum"), method == "numel"
    if method == "size" and len(args) == 1 and isinstance(args[0].value, cst.Integer) \
            and args[0].value.value == "0":
        return "sum", True
    if method in _PASS and not call.args:
        got = _kind(ctx, loop, call.func.value, depth + 1)
        return (got[0], got[1] or method in _NUMBER) if got else None
    return None


def _name_kind(ctx: Context, loop: Body, name: cst.Name, depth: int
               ) -> tuple[str, bool] | None:
    """The backward pass's loss (a batch mean, or a sum when its criterion sums), or what
    the loop last binds the name to before the term."""
    facts = ctx.facts
    for call in facts.calls_in(loop.body):
        if not is_backward(call):
            continue
        loss = _backward_loss(facts, call)
        if loss == name.value:
            return ("sum" if sum_reduction(ctx, call, loss) is not None else "mean"), False
    line = facts.line(name)
    values = [a.value for a in facts.assigns if isinstance(a, cst.Assign)
              and facts.inside(a, loop.body) and facts.line(a) < line
              and any(dotted(t.target) == name.value for t in a.targets)]
    if not values:
        return None
    return _kind(ctx, loop, values[-1], depth + 1)


def _backward_loss(facts: Facts, call: cst.Call) -> str | None:
    """`loss.backward()`, `scaler.scale(loss).backward()` -> "loss"."""
    value = cst.ensure_type(call.func, cst.Attribute).value
    if isinstance(value, cst.Call) and facts.call_name(value) and \
            (facts.call_name(value) or "").endswith("scale") and positional(value):
        value = positional(value)[0].value
    return dotted(value)


def _reduce_after(ctx: Context, loop: cst.For, kinds: dict[str, tuple[str, bool]],
                  lists: list[str], meters: list[str], gathered: list[str]) -> None:
    n = ctx.names
    code = ""
    names = list(kinds)
    if names:
        holder = n.fresh("train_sums")
        back = []
        for i, name in enumerate(names):
            kind, number = kinds[name]
            value = f"{holder}[{i}].item()" + (f" / {n.world_size}" if kind != "sum" else "")
            back.append(f"type({name})({value})" if number else
                        f"({name}.new_tensor({value}) if torch.is_tensor({name}) "
                        f"else type({name})({value}))")
        values = back[0] if len(names) == 1 else f"({', '.join(back)})"
        code += (f"{holder} = torch.tensor([{', '.join(f'float({s})' for s in names)}], "
                 f"dtype=torch.float64, device={n.device})\n"
                 f"{ctx.target.all_reduce_sum(ctx, holder, at=loop)}"
                 f"{', '.join(names)} = {values}\n")
    for name in lists:  # the same length on every rank: one batch mean a step
        holder = n.fresh(f"{name}_sums")
        code += (f"{holder} = torch.tensor({name}, dtype=torch.float64, device={n.device})\n"
                 f"{ctx.target.all_reduce_sum(ctx, holder, at=loop)}"
                 f"{name}[:] = ({holder} / {n.world_size}).tolist()\n")
    if meters:
        holder = n.fresh("meter_sums")
        code += meters_code(meters, holder, (n.fresh("meters"), n.fresh("index"),
                                             n.fresh("meter")), n.device,
                            ctx.target.all_reduce_sum(ctx, holder, at=loop))
    if gathered:
        code += gather_code(ctx, loop, gathered)
    ctx.plan.insert_after(in_with(ctx.facts, loop) or loop, statements(code))
    said = [f"{s} ({'summed' if k == 'sum' else 'averaged over the ranks'})"
            for s, (k, _) in kinds.items()] + [f"{s} (each batch's value averaged over "
                                               "the ranks)" for s in lists] + [
        f"the meters {shown(m)} (their sums and counts summed, their averages made again)"
        for m in meters] + [f"{s} (every rank's items, rank by rank)" for s in gathered]
    ctx.plan.change(loop, "data.train_metrics",
                    f"{', '.join(said)}: {'combined' if gathered else 'all-reduced'} after "
                    "the loop, every rank's share of "
                    "each batch counted, so what is printed, logged or returned after it is "
                    "the whole batch's, as on one process")
