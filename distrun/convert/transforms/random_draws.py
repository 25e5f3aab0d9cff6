"""Batches drawn at random at every step, made each rank's own (part of the data transform).

A training loop with no DataLoader whose every step draws its samples at random with a
module-level generator (`random.choice(pairs)`, `random.sample(...)`, `np.random.choice`,
`np.random.randint`, `torch.randint(len(data), (bs,))`, `torch.multinomial`), in its body
or in a function of the project the body calls: seeded alike (the script's seed, or the
harness's), every rank would draw the same samples, and a step on N ranks would be a step
on one batch N times. Before the loop, the generator is reseeded from its own next draw
plus the rank, so each rank draws its own samples, still reproducibly:

    for it in range(n_iters):                 ->  random.seed(random.getrandbits(64) + RANK)
        batch = make_batch(pairs)                 for it in range(n_iters):
        ...                                           ...

(make_batch calling `random.choice(pairs)` for each sample). The draws are independent,
with replacement (or without, within a step only), so N ranks drawing a batch each is a
global batch of N batches from the same distribution: not the original's samples (a
random draw is not reproduced anyway), the same training in law. Reported with the batch
note: divide the batch size by WORLD_SIZE to keep the global batch.

Synthetic data drawn from a distribution at every step (`torch.randn(bs)`, `torch.rand`,
`np.random.randn`, `random.gauss`... made into the batch: pytorch/examples' polynomial
fit) is the same case: each rank draws its own. Such value draws count only where they
can be all of the batch: outside any class (not a layer's noise), in a loop that walks no
data (a `while`, `range`, `count`) and reads no data by index (no subscript of a name
bound elsewhere: `x[i:j] + torch.randn_like(x)` is a slice plus noise, not a draw).

A fresh permutation's first items each step (`np.random.permutation(n)[:bs]`) is such a
draw (without replacement). Won't: permutations (`random.shuffle`, `np.random.permutation`,
`torch.randperm`) walked by slices, a generator object (`rng = np.random.default_rng(0)`):
left to `data.no_loader`.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, ModuleInfo
from distrun.convert.build import statement
from distrun.convert.context import Context
from distrun.convert.idioms import is_backward, is_optimizer_step
from distrun.convert.syntax import target_names

_DEPTH = 3
# module-level draws of samples (indices or items), by the family of their generator
_DRAWS = {  # keys: the module reseeded
    "random": ("random.choice", "random.choices", "random.sample", "random.randint",
               "random.randrange"),
    "numpy": ("numpy.random.choice", "numpy.random.randint", "numpy.random.random_integers"),
    "torch": ("torch.randint", "torch.multinomial"),
}
# module-level draws of values from a distribution: synthetic data, or noise
VALUES = {
    "random": ("random.random", "random.gauss", "random.uniform", "random.normalvariate"),
    "numpy": ("numpy.random.randn", "numpy.random.rand", "numpy.random.normal",
              "numpy.random.uniform", "numpy.random.standard_normal", "numpy.random.random",
              "numpy.random.random_sample"),
    "torch": ("torch.randn", "torch.rand", "torch.normal", "torch.randn_like",
              "torch.rand_like"),
}
_RESEED = {
    "random": "{m}.seed({m}.getrandbits(64) + {rank})",
    "numpy": "{m}.random.seed(({m}.random.randint(2 ** 31) + {rank}) % 2 ** 32)",
    "torch": "{m}.manual_seed(int({m}.randint(2 ** 62, ())) + {rank})",
}


def share_random_draws(ctx: Context) -> bool:
    """Reseed by rank before each innermost training loop that draws its samples at
    random every step. True if any."""
    done = False
    for loop in _loops(ctx):
        steps, draws = _reach(ctx, loop.body, 0)
        if draws and all(call in _values_of(ctx) for _, call in draws) \
                and not walks_no_data(ctx, loop):
            continue
        if not steps or not draws or any(_reach(ctx, inner.body, 0) == (True, draws)
                                         for inner in _loops(ctx, loop.body)):
            continue
        shown = []
        for family in sorted({f for f, _ in draws}):
            call = min((c for f, c in draws if f == family), key=ctx.facts.line)
            if not reseed_before(ctx, loop, family):
                ctx.plan.finding(call, "data.random_draws_unseeded",
                                 f"each step draws its samples at random with "
                                 f"`{ctx.facts.code(call.func)}(...)`, whose module is "
                                 "not imported where the loop is: its generator is not "
                                 "reseeded by rank, so ranks seeded alike draw the same "
                                 "samples", f"import `{family}` in the loop's module and "
                                 "convert again, or reseed it by rank before the loop")
                continue
            lines = sorted({(ctx.facts.module_of(c).path, ctx.facts.line(c))
                            for f, c in draws if f == family})
            where = ", ".join(f"{path}:{line}" for path, line in lines)
            shown.append(f"`{ctx.facts.code(call.func)}(...)` at {where}")
        if not shown:
            continue
        ctx.plan.change(loop, "data.random_draws",
                        f"each step draws its samples at random ({', '.join(shown)}): the "
                        "generator is reseeded by rank before the loop, so each rank draws "
                        "its own (a step sees WORLD_SIZE draws: divide the batch size by "
                        "WORLD_SIZE to train as before)")
        ctx.plan.shards_batches(loop)
        done = True
    return done


def _loops(ctx: Context, within: cst.CSTNode | None = None) -> list[cst.For | cst.While]:
    """The loops in `within` (the project's, without), in source order."""
    return [n for n in ctx.facts.nodes(cst.For, cst.While) if isinstance(
        n, (cst.For, cst.While)) and (within is None or ctx.facts.inside(n, within))]


def _reach(ctx: Context, body: cst.CSTNode, depth: int) -> tuple[bool, frozenset[
        tuple[str, cst.Call]]]:
    """(does `body`, or a function of the project it calls, step the model; the draws of
    samples it makes that way)."""
    facts = ctx.facts
    steps = False
    draws: set[tuple[str, cst.Call]] = set()
    for call in facts.calls_in(body):
        steps = steps or is_backward(call) or is_optimizer_step(call)
        name = facts.call_name(call) or ""
        family = next((f for f, names in _DRAWS.items() if name in names), None) or (
            _PERMUTATIONS.get(name) if _prefix_taken(facts, call) else None)
        if family is None and facts.enclosing_class(call) is None:
            family = next((f for f, names in VALUES.items() if name in names), None)
        if family is not None:
            draws.add((family, call))
        found = ctx.flow.callee(call) if depth < _DEPTH else None
        if found is not None and found[0] is not body:
            inner_steps, inner_draws = _reach(ctx, found[0].body, depth + 1)
            steps, draws = steps or inner_steps, draws | inner_draws
    return steps, frozenset(draws)


_PERMUTATIONS = {"numpy.random.permutation": "numpy", "torch.randperm": "torch"}


def _prefix_taken(facts: Facts, call: cst.Call) -> bool:
    """`np.random.permutation(n)[:batch_size]`: a fresh permutation's first items, a draw
    without replacement like `np.random.choice(n, bs, replace=False)` (powerful-gnns'
    batch of graphs each step), not an epoch's permutation walked in slices."""
    parent = facts.parent.get(call)
    if not isinstance(parent, cst.Subscript) or parent.value is not call or len(
            parent.slice) != 1 or not isinstance(parent.slice[0].slice, cst.Slice):
        return False
    part = parent.slice[0].slice
    return part.upper is not None and part.step is None and (
        part.lower is None or isinstance(part.lower, cst.Integer) and part.lower.value == "0")


def reseed_before(ctx: Context, loop: cst.For | cst.While, family: str) -> bool:
    """Reseed `family`'s module-level generator by rank just before `loop` (False if the
    module is not imported where the loop is)."""
    module = _module_name(ctx, loop, family)
    if module is None:
        return False
    ctx.plan.insert_before(loop, [statement(
        _RESEED[family].format(m=module, rank=_rank(ctx, loop)) + "\n")])
    return True


def _values_of(ctx: Context) -> set[cst.Call]:
    facts = ctx.facts
    return {call for call in facts.calls
            if any(facts.call_name(call) in names for names in VALUES.values())}


def walks_no_data(ctx: Context, loop: cst.For | cst.While) -> bool:
    """Does `loop` walk no data (a `while`, or a `for` over `range`/`count`) and read none
    by index, in its body or in the project's functions it calls?"""
    facts = ctx.facts
    if isinstance(loop, cst.For):
        it = loop.iter
        name = facts.call_name(it) if isinstance(it, cst.Call) else None
        if name not in {"range", "itertools.count", "count"}:
            return False
    return not _indexes_data(ctx, loop, 0)


def _indexes_data(ctx: Context, node: cst.CSTNode, depth: int) -> bool:
    """Does `node` (a loop, a function) read by index a name it does not bind itself
    (`data[i:j]`, `self.x[i]`; a parameter counts as data), or call a project function
    that does?"""
    bound: set[str] = set()
    subscripted: list[str] = []

    class Visit(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            bound.update(target_names(node.target))

        def visit_For(self, node: cst.For) -> None:
            bound.update(target_names(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            bound.update(target_names(node.target))

        def visit_CompFor(self, node: cst.CompFor) -> None:
            bound.update(target_names(node.target))

        def visit_Subscript(self, node: cst.Subscript) -> None:
            root: cst.BaseExpression = node.value
            while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
                root = root.func if isinstance(root, cst.Call) else root.value
            if isinstance(root, cst.Name):
                subscripted.append(root.value)

    node.visit(Visit())
    if any(name not in bound for name in subscripted):
        return True
    for call in ctx.facts.calls_in(node):
        found = ctx.flow.callee(call) if depth < _DEPTH else None
        if found is not None and found[0] is not node \
                and _indexes_data(ctx, found[0], depth + 1):
            return True
    return False


def _module_name(ctx: Context, loop: cst.CSTNode, family: str) -> str | None:
    """The name the draw's module is bound to in the loop's module (`random`, `np`,
    `torch`), if it is imported there, or by a module of the project it star-imports
    (`from helpers import *` brings helpers' `import random` along)."""
    return _bound_to(ctx.facts, ctx.facts.module_of(loop), family, 0)


def _bound_to(facts: Facts, info: ModuleInfo, family: str, depth: int) -> str | None:
    found = next((name for name, full in sorted(info.imports.items()) if full == family), None)
    if found is not None or depth >= _DEPTH:
        return found
    for star in info.star_imports:
        other = facts.local_module(star)
        found = _bound_to(facts, other, family, depth + 1) if other is not None else None
        if found is not None and not found.startswith("_"):  # `import *` skips _names
            return found
    return None


def _rank(ctx: Context, loop: cst.CSTNode) -> str:
    n = ctx.names
    if ctx.facts.module_of(loop) is ctx.facts.entry:
        return n.rank
    ctx.need("dist", at=loop)
    return f"({n.dist}.get_rank() if {n.dist}.is_initialized() else 0)"
