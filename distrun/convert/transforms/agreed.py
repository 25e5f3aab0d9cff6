"""Loops left on a rank's own training value: every rank leaves at the same step.

One process tests its loss and leaves the loop (`if loss < 1e-3: break`, `if
torch.isnan(loss): return`, early stopping on the training loss, `continue` past a bad
step). Under DDP each rank computes that value on its own share of the batch: the ranks
would leave at different steps, and the one still training waits in DDP's all-reduce
for a partner that has left (a hang, or "Connection closed by peer"). Each value of the
rank's own training the test reads is averaged over the ranks first:

    loss = output.item()                 ->  loss = output.item()
    if loss < 1e-3:                          if mean_over_ranks(loss) < 1e-3:
        break                                    break

A rank's own value: the loss a backward pass starts from, a training forward pass's
output, its clock (`if time.time() - start > budget: break`), whatever is computed from
them in the same function (`x += loss.item()`, also a counter changed under a test of
them: `bad_epochs += 1`), and a function's result that returns one. The mean of equal
shares' mean losses is the global batch's loss: the test the single process makes, so
the run leaves the loop where the original does; every rank gets the same mean, so all
leave together whatever the value (a clock's mean is one time for all).

Exits: `break`, `continue`, `return`, `raise`, `sys.exit()` under an `if` inside a loop
that trains, and a `while` test of a loop that trains. The same for an `if` inside such a
loop that saves a checkpoint (`torch.save`: keeping the best weights on the training
loss): rank 0 would keep the weights its own share finds best. Won't: a value reaching the test
through an attribute (`self.best`) or another function's argument; a loss summed over
the batch is compared as its mean over the ranks (1/WORLD_SIZE of the original's sum).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, Scope, dotted
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, trains
from distrun.convert.models import find_models
from distrun.convert.names import Names
from distrun.convert.syntax import target_names

_EXITS = (cst.Break, cst.Continue, cst.Return, cst.Raise)
# each rank reads its own clock: a time limit tested on it is left at another step
_CLOCKS = {"time.time", "time.perf_counter", "time.monotonic", "time.process_time",
           "time.time_ns", "time.perf_counter_ns", "time.monotonic_ns",
           "timeit.default_timer", "datetime.datetime.now", "datetime.datetime.utcnow"}
_KEEPS = {"append", "extend", "insert"}
_EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
# a save under a test of the rank's own value: rank 0 would keep other weights (the best)
_SAVES = frozenset({"torch.save"})


def plan_agreed_exits(ctx: Context) -> None:
    taint = _Taint(ctx)
    for test, owner in _exit_tests(ctx.facts):
        loop = owner if isinstance(owner, cst.While) else next(
            iter(ctx.facts.enclosing_loops(owner)), None)
        if loop is None or not trains(ctx.facts, loop, flow=ctx.flow):
            continue
        local = taint.of(ctx.facts.scope(owner))
        names = _tainted_reads(test, local, ctx.facts)
        if not names:
            continue
        _agree(ctx, owner, names)
    for call in ctx.facts.calls:
        if _steps_on_a_metric(ctx, call):
            names = _tainted_reads(call.args[0].value, taint.of(ctx.facts.scope(call)),
                                   ctx.facts)
            if names:
                _agree_metric(ctx, call, names)


TRANSFORM = Transform("agreed", plan_agreed_exits)


def _agree(ctx: Context, owner: cst.If | cst.While, names: list[cst.Name | cst.Call]
           ) -> None:
    n = ctx.names
    ctx.need("dist", "torch", at=owner)
    ctx.define_helper("mean_over_ranks", owner, helper_code(n))
    for name in names:
        ctx.plan.rewrite(name, lambda node: expression(f"{n.mean_over_ranks}({code_of(node)})"))
    read = ", ".join(sorted({f"`{ctx.facts.code(name)}`" for name in names}))
    test = " ".join(ctx.facts.code(owner.test).split())
    if isinstance(owner, cst.If) and not _leaves(owner.body) and not (
            owner.orelse is not None and _leaves(owner.orelse)):
        ctx.plan.change(owner, "agreed.kept",
                        f"the checkpoint is saved when `{test}` holds, a test of what each "
                        f"rank has for itself ({read}): each value is averaged over the ranks "
                        "first, so the weights kept are those the original keeps (rank 0's "
                        "own share would choose others)")
        return
    how = "the loop goes on while" if isinstance(owner, cst.While) else "the loop is left when"
    ctx.plan.change(owner, "agreed.exit",
                    f"{how} `{' '.join(ctx.facts.code(owner.test).split())}` holds, a test "
                    f"of what each rank has for itself ({read}): each value is averaged over "
                    "the ranks first, so every rank leaves at the same step (the mean of the "
                    "ranks' mean losses is the global batch's, the original's test)")


def _steps_on_a_metric(ctx: Context, call: cst.Call) -> bool:
    """`scheduler.step(metric)` on a ReduceLROnPlateau of the script?"""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "step"
            and len(call.args) == 1 and call.args[0].keyword is None):
        return False
    owner = dotted(func.value)
    facts = ctx.facts
    return owner is not None and any(
        isinstance(a, cst.Assign) and isinstance(a.value, cst.Call)
        and (facts.call_name(a.value) or "").endswith("ReduceLROnPlateau")
        and any(dotted(t.target) == owner for t in a.targets) for a in facts.assigns)


def _agree_metric(ctx: Context, call: cst.Call, names: list[cst.Name | cst.Call]) -> None:
    n = ctx.names
    ctx.need("dist", "torch", at=call)
    ctx.define_helper("mean_over_ranks", call, helper_code(n))
    for name in names:
        ctx.plan.rewrite(name, lambda node: expression(f"{n.mean_over_ranks}({code_of(node)})"))
    ctx.plan.change(call, "agreed.scheduler",
                    f"`{' '.join(ctx.facts.code(call).split())}` steps the learning rate on "
                    "what each rank has for itself: the value is averaged over the ranks "
                    "first, so every rank keeps the same learning rate (else each would lower it "
                    "at another epoch, and their weights would drift apart)")


def helper_code(n: Names) -> str:
    return f'''

def {n.mean_over_ranks}(value):
    """distrun: `value` (a number, a tensor, a list of numbers) averaged over the ranks,
    so a test of it takes the same branch on every rank."""
    if not {n.dist}.is_initialized():
        return value
    device = torch.device("cuda", torch.cuda.current_device()) \\
        if {n.dist}.get_backend() == "nccl" else torch.device("cpu")
    plain = value.detach() if isinstance(value, torch.Tensor) else value
    total = torch.as_tensor(plain, dtype=torch.float64, device=device).clone()
    {n.dist}.all_reduce(total)
    total /= {n.dist}.get_world_size()
    if isinstance(value, torch.Tensor):
        return total.to(dtype=value.dtype, device=value.device)
    if isinstance(value, (list, tuple)):
        return type(value)(total.tolist())
    return type(value)(total.item())
'''


def _exit_tests(facts: Facts) -> list[tuple[cst.BaseExpression, cst.If | cst.While]]:
    """(test, its statement) of each `if` whose branches leave or skip, and each `while`."""
    found: list[tuple[cst.BaseExpression, cst.If | cst.While]] = []
    for node in facts.nodes(cst.If, cst.While):
        if isinstance(node, cst.While) or isinstance(node, cst.If) and (
                _leaves(node.body) or node.orelse is not None and _leaves(node.orelse)
                or _leaves(node.body, _SAVES)):
            assert isinstance(node, (cst.If, cst.While))
            found.append((node.test, node))
    return found


def _leaves(block: cst.CSTNode, calls: frozenset[str] = _EXIT_CALLS) -> bool:
    """Does `block` hold an exit of its own (not in a nested loop or function)? With
    `calls=_SAVES`: a checkpoint's save instead."""
    exits = calls is _EXIT_CALLS
    if isinstance(block, cst.If):
        return _leaves(block.body, calls) or block.orelse is not None and exits \
            and _leaves(block.orelse, calls)
    if isinstance(block, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return False
    if exits and isinstance(block, _EXITS):
        return True
    if isinstance(block, cst.Call) and dotted(block.func) in calls:
        return True
    return any(_leaves(child, calls) for child in block.children)


def _tainted_reads(test: cst.BaseExpression, tainted: set[str], facts: Facts
                   ) -> list[cst.Name | cst.Call]:
    """The tainted names and the clock readings `test` reads."""
    found: list[cst.Name | cst.Call] = []

    class Visit(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False  # `loss.item`: the attribute's name is not a read

        def visit_Name(self, node: cst.Name) -> None:
            if node.value in tainted:
                found.append(node)

        def visit_Call(self, node: cst.Call) -> bool:
            if facts.call_name(node) in _CLOCKS:
                found.append(node)
                return False
            # a keyword's name is not a read
            node.func.visit(self)
            for arg in node.args:
                arg.value.visit(self)
            return False

    test.visit(Visit())
    return found


class _Taint:
    """The names of each scope that hold a rank's own training value."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cache: dict[int, set[str]] = {}

    def of(self, scope: Scope) -> set[str]:
        if id(scope) not in self.cache:
            self.cache[id(scope)] = set()  # a recursive call sees nothing yet
            self.cache[id(scope)] = self._compute(scope)
        return self.cache[id(scope)]

    def _compute(self, scope: Scope) -> set[str]:
        facts = self.ctx.facts
        tainted: set[str] = set()
        calls = [c for c in (facts.calls_in(scope) if isinstance(scope, cst.FunctionDef)
                             else facts.module_of(scope).calls) if facts.scope(c) is scope]
        for call in calls:
            if is_backward(call) and isinstance(call.func, cst.Attribute):
                name = dotted(call.func.value)
                if name is not None and "." not in name:
                    tainted.add(name)
        kept = [c for c in calls if isinstance(c.func, cst.Attribute) and c.func.attr.value
                in _KEEPS and isinstance(c.func.value, cst.Name)]
        forwards = self._forwards()
        assigns = _assignments(scope)
        for _ in range(6):
            before = len(tainted)
            for assign in assigns:
                value = assign.value
                if value is None:
                    continue
                if _reads(value, tainted, facts) or self._from_training(value, forwards) \
                        or self._under_test(assign, scope, tainted):
                    targets = [t.target for t in assign.targets] \
                        if isinstance(assign, cst.Assign) else [assign.target]
                    for target in targets:
                        tainted |= target_names(target)
            for call in kept:  # `losses.append(loss.item())`
                if any(_reads(arg.value, tainted, facts) for arg in call.args):
                    tainted.add(call.func.value.value)  # type: ignore[attr-defined]
            if len(tainted) == before:
                break
        return tainted

    def _forwards(self) -> set[cst.Call]:
        ctx = self.ctx
        models = ctx.models or find_models(ctx.facts, ctx.flow)
        return {call for model in models for call in model.forwards}

    def _from_training(self, value: cst.BaseExpression, forwards: set[cst.Call]) -> bool:
        """Is `value` a training forward pass, or a call of a function returning a rank's
        own training value?"""
        for call in _calls(value):
            if call in forwards:
                return True
            found = self.ctx.flow.callee(call)
            if found is not None and self._returns_taint(found[0]):
                return True
        return False

    def _returns_taint(self, func: cst.FunctionDef) -> bool:
        tainted = self.of(func)
        returns: list[cst.Return] = []

        class Visit(cst.CSTVisitor):
            def visit_Return(self, node: cst.Return) -> None:
                returns.append(node)

            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is func

        func.visit(Visit())
        facts = self.ctx.facts
        return any(r.value is not None and _reads(r.value, tainted, facts) for r in returns)

    def _under_test(self, assign: cst.CSTNode, scope: Scope, tainted: set[str]) -> bool:
        """Is `assign` made under an `if` whose test reads a tainted name?"""
        for anc in self.ctx.facts.ancestors(assign):
            if anc is scope:
                return False
            if isinstance(anc, cst.If) and _reads(anc.test, tainted, self.ctx.facts):
                return True
        return False


def _assignments(scope: Scope) -> list[cst.Assign | cst.AnnAssign | cst.AugAssign]:
    """The assignments of `scope` itself (not of the functions or classes it defines)."""
    found: list[cst.Assign | cst.AnnAssign | cst.AugAssign] = []

    class Visit(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is scope

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            found.append(node)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            found.append(node)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            found.append(node)

    scope.visit(Visit())
    return found


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Visit(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

    node.visit(Visit())
    return found


def _reads(node: cst.CSTNode, names: set[str], facts: Facts) -> bool:
    return bool(_tainted_reads(node, names, facts)) if isinstance(
        node, cst.BaseExpression) else False
