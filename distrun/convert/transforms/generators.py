"""numpy's, Python's and torch's global generators, unseeded, started from rank 0's state
(part of the data transform).

A project that draws from `numpy.random` (or `random`) and never seeds it gets a
different stream in each process: Python seeds both from the operating system. What the
script draws once to make its data (shengliu66/ELR: a per-class train/validation split
with `np.random.shuffle` in a loop over the classes, symmetric label noise with
`np.random.permutation` and `np.random.randint` in a loop over the samples, in a
Dataset's constructor) would then differ between the ranks: each rank trains on its own
split with its own noisy labels, silently. Draws made once at the top level are made
rank 0's one by one (splits.py); those in loops and in a data set's methods are not. After
the set-up, every rank takes rank 0's generator state instead:

    numpy.random.set_state(rank0_value(numpy.random.get_state()))
    random.setstate(rank0_value(random.getstate()))

Every rank then draws what rank 0 draws, which is what the original would draw in that
process. Randomness a step draws (a numpy augmentation) is then alike on every rank, as in
a script that seeds; batches drawn at random in the loop are reseeded by rank before it
(`data.random_draws`). Not for a library the entry script seeds (every rank draws the
same already; a seed in another module may come after the data is drawn) or that the
project does not draw from.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from distrun.convert.analysis import walk
from distrun.convert.context import Context
from distrun.convert.idioms import train_loops, trains
from distrun.convert.targets.base import in_module_class
from distrun.convert.transforms.random_draws import reseed_before
from distrun.convert.transforms.rank0_values import helper_code as rank0_value_code

# library -> (its draws' prefix, its seeds, the state's getter and setter)
_LIBRARIES = {
    "numpy": ("numpy.random.", {"numpy.random.seed"}, "numpy.random.get_state()",
              "numpy.random.set_state"),
    "random": ("random.", {"random.seed"}, "random.getstate()", "random.setstate"),
    # torch seeds its generator from the system too (torch.initial_seed() differs from one
    # process to the next): a sampler's permutation drawn when it is made, initial weights
    # kept (deep-copied) before the wrap to rewind to, differ by rank
    "torch": ("torch.", {"torch.manual_seed", "torch.random.manual_seed"},
              "torch.get_rng_state()", "torch.set_rng_state"),
}
# torch's draws from its global generator (its other names are no draws)
_TORCH_DRAWS = {"torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.normal",
                "torch.bernoulli", "torch.multinomial", "torch.poisson", "torch.rand_like",
                "torch.randn_like", "torch.randint_like"}
# what draws nothing from the global generator
_NOT_DRAWS = {"numpy.random.seed", "numpy.random.default_rng", "numpy.random.RandomState",
              "numpy.random.Generator", "numpy.random.get_state", "numpy.random.set_state",
              "numpy.random.SeedSequence", "numpy.random.PCG64", "random.seed",
              "random.Random", "random.getstate", "random.setstate", "random.SystemRandom"}


# draws of an order (a shuffle of the batches, a permutation): the ranks must agree on
# them to share the data out, also during the training
_ORDERS = {"shuffle", "permutation", "sample", "choice", "choices", "randperm", "multinomial"}


def same_generators(ctx: Context, seed_all: set[str],
                    made_rank0s: Callable[[cst.Call], bool]) -> None:
    """`made_rank0s(call)`: a draw splits.py makes rank 0's by itself (torch's are then
    left to it)."""
    facts = ctx.facts
    names = [facts.call_name(c) or "" for c in facts.calls]
    # a seed in the entry (at its top, in its main, or in a helper it calls: `setup_seed`)
    # comes before the data is made; one elsewhere may come after (ELR seeds numpy in a
    # data loader's method, once the noisy labels are drawn)
    helpers = {id(found[0]) for call in facts.calls if facts.module_of(call).is_entry
               and (found := ctx.flow.callee(call)) is not None}  # `setup_seed(0)` of utils
    seeded = {name for call, name in zip(facts.calls, names, strict=True)
              if facts.module_of(call).is_entry or id(facts.function(call)) in helpers}
    if seeded & seed_all:
        return
    entry, n = facts.entry, ctx.names
    for library, (drawn, seeds, state, restore) in _LIBRARIES.items():
        draws = [c for c, name in zip(facts.calls, names, strict=True)
                 if name.startswith(drawn) and name not in _NOT_DRAWS
                 and (library != "torch" or name in _TORCH_DRAWS)]
        if library == "torch":
            draws = _torch_needs_agreeing(ctx, [c for c in draws if not made_rank0s(c)])
        if not draws or seeded & seeds:
            continue
        if library in entry.bound_names and entry.imports.get(library) != library:
            continue  # (its name is the script's: no `import` that would take it over)
        ctx.need(library, at=entry.module)  # (the set-up runs before a later cell's import)
        ctx.need("dist", at=entry.module)
        ctx.define_helper("rank0_value", entry.module, rank0_value_code(n))
        ctx.setup_lines.append(f"{restore}({n.rank0_value}({state}))  # {library}'s generator: "
                               "rank 0's state on every rank\n")
        first = min(draws, key=lambda c: (facts.modules.index(facts.module_of(c)),
                                          facts.line(c)))
        orders = [c for c in draws if (facts.call_name(c) or "").rsplit(".", 1)[-1] in _ORDERS]
        reseeded = [] if orders else _reseed_for_training(ctx, library)
        drew = (f"`{facts.code(first.func)}(...)` keeps weights drawn from torch's global "
                "generator (initial weights to rewind to), which the entry script never "
                "seeds: each process would start it from its own entropy, so each rank would "
                "keep its own" if facts.call_name(first) == "copy.deepcopy" else
                f"`{facts.code(first.func)}(...)` draws from {library}'s global generator, "
                "which the entry script never seeds: each process would start it from its "
                "own entropy, so what the ranks draw to make their data would differ")
        ctx.plan.change(first, "data.same_generator",
                        f"{drew}; after the set-up every rank takes rank 0's state "
                        f"(`{restore}({n.rank0_value}({state}))`)" + (
                            ", and it is reseeded by rank before the training (line "
                            f"{', '.join(map(str, reseeded))}), so what the steps draw "
                            "(augmentation, noise) stays each rank's own" if reseeded else ""))


def _reseed_for_training(ctx: Context, library: str) -> list[int]:
    """Reseed `library`'s generator by rank before the outermost loop around each
    training loop (in its function): the lines."""
    facts, done = ctx.facts, set()
    lines: list[int] = []
    for tl in train_loops(facts, ctx.flow):
        outer = tl.loop
        for up in facts.enclosing_loops(tl.loop):
            if facts.function(up) is facts.function(tl.loop):
                outer = up  # type: ignore[assignment]
        if id(outer) in done:
            continue
        done.add(id(outer))
        if reseed_before(ctx, outer, library):
            lines.append(facts.line(outer))
    return sorted(lines)


def _torch_needs_agreeing(ctx: Context, draws: list[cst.Call]) -> list[cst.Call]:
    """torch's draws the ranks must agree on that nothing else makes agree: those in a
    function or method of the project that does not train (a sampler's permutation drawn
    in its `__init__`, a split made in a loader helper; the top level's are rank 0's one
    by one: splits.py), or, when the script deep-copies a model or its state before
    training (weights to rewind to: the lottery ticket), the first draw of all (each
    rank's initial weights would be its own; DDP makes only the wrapped model's alike): the
    copy, where it is said."""
    facts, flow = ctx.facts, ctx.flow
    loops = [*facts.for_loops, *(n for n in facts.nodes(cst.While) if isinstance(n, cst.While))]
    steps = [loop for loop in loops if trains(facts, loop.body, flow=flow)]
    training = {id(f) for loop in steps if (f := facts.function(loop)) is not None}

    def in_training(node: cst.CSTNode, depth: int = 0) -> bool:
        """In a training loop, in a layer's method, or in a function called from one of
        them (3 calls deep)."""
        if any(facts.inside(node, loop) for loop in steps) or in_module_class(ctx, node):
            return True  # (a layer's weights: DDP broadcasts them; its forward's: a step's)
        func = facts.function(node)
        if func is None or depth > 2:
            return False
        if id(func) not in training and trains(facts, func, flow=flow):
            return True  # a step function
        return any(in_training(site, depth + 1) for site, _ in ctx.calls_of(func))

    kept = [c for c in draws if (func := facts.function(c)) is not None
            and ctx.calls_of(func) and not in_training(c)]  # (never called: a demo)
    if kept:
        return kept
    snapshots = [c for c in facts.calls if facts.call_name(c) == "copy.deepcopy" and c.args
                 and any(isinstance(n, cst.Name) and n.value == "state_dict"
                         or isinstance(n, cst.Attribute) and n.attr.value == "state_dict"
                         for n in walk(c.args[0].value)) and not in_training(c)]
    return snapshots[:1]  # (said at the copy: the weights it keeps are drawn)
