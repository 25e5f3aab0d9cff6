"""numpy's and Python's global generators, unseeded, started from rank 0's state (part of
the data transform).

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

from distrun.convert.context import Context
from distrun.convert.idioms import train_loops
from distrun.convert.transforms.random_draws import reseed_before
from distrun.convert.transforms.rank0_values import helper_code as rank0_value_code

# library -> (its draws' prefix, its seeds, the state's getter and setter)
_LIBRARIES = {
    "numpy": ("numpy.random.", {"numpy.random.seed"}, "numpy.random.get_state()",
              "numpy.random.set_state"),
    "random": ("random.", {"random.seed"}, "random.getstate()", "random.setstate"),
}
# what draws nothing from the global generator
_NOT_DRAWS = {"numpy.random.seed", "numpy.random.default_rng", "numpy.random.RandomState",
              "numpy.random.Generator", "numpy.random.get_state", "numpy.random.set_state",
              "numpy.random.SeedSequence", "numpy.random.PCG64", "random.seed",
              "random.Random", "random.getstate", "random.setstate", "random.SystemRandom"}


# draws of an order (a shuffle of the batches, a permutation): the ranks must agree on
# them to share the data out, also during the training
_ORDERS = {"shuffle", "permutation", "sample", "choice", "choices"}


def same_generators(ctx: Context, seed_all: set[str]) -> None:
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
                 if name.startswith(drawn) and name not in _NOT_DRAWS]
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
        ctx.plan.change(first, "data.same_generator",
                        f"`{facts.code(first.func)}(...)` draws from {library}'s global "
                        "generator, which the entry script never seeds: each process would "
                        "start it from its own entropy, so what the ranks draw to make their "
                        "data would differ; after the set-up every rank takes rank 0's state "
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
