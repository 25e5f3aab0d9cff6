"""Random choices of data that every rank must make alike (part of the data transform).

A script that splits its data at random without a seed gets a different split on each
rank: each rank's validation set then overlaps the other ranks' training data, and a
DistributedSampler over "the" training set shards sets that differ. Made once, before
the loaders (not in a loop), the choice is still drawn on every rank as the original
draws it (the random state moves on as it did), then every rank takes rank 0's:

    a, b = random_split(ds, [n1, n2])  ->  a, b = rank0_split(random_split(ds, [n1, n2]))
    idx = torch.randperm(n)            ->  idx = rank0_value(torch.randperm(n))
    idx = np.random.permutation(n)     ->  idx = rank0_value(np.random.permutation(n))
    a, b = train_test_split(X, y)      ->  a, b = rank0_value(train_test_split(X, y))
    df = df.sample(frac=1)             ->  df = rank0_value(df.sample(frac=1))
    for tr, va in kf.split(X):         ->  for tr, va in rank0_value(list(kf.split(X))):
        (kf = KFold(5, shuffle=True): scikit-learn's splitters draw from numpy's
        global generator when not given random_state=; the folds are drawn when the
        loop starts, as the original draws them)
    np.random.shuffle(idx)             ->  np.random.shuffle(idx)
                                           idx[:] = rank0_value(idx)
    W = torch.randn(4, 1) * 5          ->  W = rank0_value(torch.randn(4, 1)) * 5

`rank0_value` broadcasts rank 0's object (`dist.broadcast_object_list`); `rank0_split`
gives each part of a split rank 0's indices. Both are defined with the set-up, and give
their argument back in a world of one. Rank 0 draws what the original draws from the
same random state, so the conversion trains on the original's split.

Only a choice made once: at the top level, or in a function or method called from one
place that itself runs once, outside any loop (every rank reaches the broadcast
together); never in a Dataset's, Sampler's or Module's methods, nor in a special method
(they run per sample, per batch). Left alone: a call given its own generator or
`random_state=`, a script that seeds the library it uses (every rank then draws the
same), a draw in a loop or in what runs many times (per-step randomness, per rank by
design).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword
from distrun.convert.build import code_of, expression, statement
from distrun.convert.context import Context
from distrun.convert.names import Names
from distrun.convert.transforms.generators import same_generators
from distrun.convert.transforms.rank0_values import helper_code as rank0_value_code
from distrun.convert.transforms.rank0_values import through_rank0

_SPLITS = {"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"}
_DRAWS = {"torch.randperm": "torch", "numpy.random.permutation": "numpy",
          "random.sample": "random", "numpy.random.choice": "numpy",
          # numpy's generator when not given random_state=
          "sklearn.model_selection.train_test_split": "numpy"}
# values drawn once from a distribution: synthetic data, a target function's coefficients
_VALUES = {"torch.randn": "torch", "torch.rand": "torch", "torch.normal": "torch",
           "torch.randint": "torch", "numpy.random.randint": "numpy",
           "numpy.random.randn": "numpy", "numpy.random.rand": "numpy",
           "numpy.random.normal": "numpy", "numpy.random.uniform": "numpy",
           "numpy.random.standard_normal": "numpy", "numpy.random.random": "numpy"}
# scikit-learn's splitters: `.split()` draws from numpy's global generator when the
# splitter has no random_state= (the KFold family only with shuffle=True)
_SPLITTERS = {f"sklearn.model_selection.{name}": shuffles for name, shuffles in (
    ("KFold", True), ("StratifiedKFold", True), ("GroupKFold", True),
    ("RepeatedKFold", False), ("RepeatedStratifiedKFold", False), ("ShuffleSplit", False),
    ("StratifiedShuffleSplit", False), ("GroupShuffleSplit", False))}
_SHUFFLES = {"numpy.random.shuffle": "numpy", "random.shuffle": "random"}
_SEEDS = {
    "torch": {"torch.manual_seed", "torch.random.manual_seed"},
    "numpy": {"numpy.random.seed"},
    "random": {"random.seed"},
}
# Seed every library at once.
_SEED_ALL = {"lightning.seed_everything", "pytorch_lightning.seed_everything",
             "lightning.pytorch.seed_everything", "transformers.set_seed",
             "accelerate.utils.set_seed", "lightning_fabric.seed_everything"}


def same_splits(ctx: Context) -> None:
    """Each unseeded random choice of data made once: rank 0's on every rank; numpy's and
    Python's generators, when never seeded, rank 0's state after the set-up."""
    facts = ctx.facts
    same_generators(ctx, _SEED_ALL, lambda call: _made_once(ctx, call) or _in_data_set_init(
        ctx, call))
    seeded = {library for library, seeds in _SEEDS.items()
              if any(facts.call_name(c) in seeds | _SEED_ALL for c in facts.calls)}
    built: set[int] = set()  # the data sets' constructions already made rank 0's
    for call in facts.calls:
        name = facts.call_name(call) or ""
        splitter = _unseeded_splitter(ctx, call)
        library = "torch" if name in _SPLITS else \
            _DRAWS.get(name) or _SHUFFLES.get(name) or _VALUES.get(name) or (
                "numpy" if _frame_sample(call) or splitter else None)
        if library is None or library in seeded or keyword(call, "generator") is not None \
                or keyword(call, "random_state") is not None:
            continue
        if _drawn_in_a_data_set(ctx, call, built):
            continue
        if not _made_once(ctx, call) or name in _VALUES and not _every_rank_runs(ctx, call):
            continue
        if name in _SHUFFLES:
            _shuffled(ctx, call)
        elif splitter:
            _folds(ctx, call)
        else:
            _drawn(ctx, call, "rank0_split" if name in _SPLITS else "rank0_value")


def _frame_sample(call: cst.Call) -> bool:
    """pandas' `df.sample(frac=1)` / `df.sample(n=100)` (a shuffle or a subset drawn with
    numpy's generator when not given random_state=)."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "sample" and (
        keyword(call, "frac") is not None or keyword(call, "n") is not None)


def _in_data_set_init(ctx: Context, call: cst.Call) -> bool:
    """Is `call` in a Dataset's `__init__` (what `_drawn_in_a_data_set` takes)?"""
    facts = ctx.facts
    func = facts.function(call)
    cls = facts.enclosing_class(func) if func is not None else None
    return func is not None and cls is not None and _built_by_init(facts, cls, func) and any(
        (facts.qualname(b.value) or "").endswith("Dataset") for b in cls.bases)


def _drawn_in_a_data_set(ctx: Context, call: cst.Call, built: set[int]) -> bool:
    """A draw in a Dataset's `__init__` (synthetic samples made when it is built: a
    sequence data set of random lengths and labels): each rank would build other data,
    and the sampler would shard sets that differ. Each construction made once becomes
    `rank0_draws(Data, ...)`: every rank builds it from rank 0's random states, drawing
    what rank 0 draws as the original does (nothing is sent: a data set holding a lambda
    need not pickle, a big one need not cross the network). True when the draw is in such
    an `__init__` (handled or not)."""
    facts = ctx.facts
    func = facts.function(call)
    cls = facts.enclosing_class(func) if func is not None else None
    if func is None or cls is None or not _built_by_init(facts, cls, func) or not any(
            (ctx.facts.qualname(b.value) or "").endswith("Dataset") for b in cls.bases):
        return False
    aliases = {t.target.value for a in facts.assigns if isinstance(a, cst.Assign)
               and isinstance(a.value, cst.Name) and a.value.value == cls.name.value
               for t in a.targets if isinstance(t.target, cst.Name)}  # `Data = Identity`
    for made in facts.calls:
        if not (facts.local_definition(made) is cls or isinstance(made.func, cst.Name)
                and made.func.value in aliases) or id(made) in built \
                or not _made_once(ctx, made):
            continue
        built.add(id(made))
        draws = ctx.names.rank0_draws
        ctx.need("dist", at=made)
        ctx.define_helper("rank0_draws", made, _draws_code(ctx.names))
        ctx.plan.rewrite(made, through_rank0(draws))
        ctx.plan.change(made, "data.same_split", f"`{cls.name.value}.__init__` draws its "
                        f"samples without a seed (`{facts.code(call.func)}(...)`): each "
                        f"rank would build other data; `{draws}({cls.name.value}, ...)`: "
                        "every rank builds it from rank 0's random states (random, numpy, "
                        "torch), so it draws what rank 0 draws (nothing is sent: the data "
                        "set need not pickle)")
    return True


def _draws_code(n: Names) -> str:
    return f'''

def {n.rank0_draws}(make, *args, **kwargs):
    """distrun: `make(*args, **kwargs)` built on every rank from rank 0's random states
    (random, numpy, torch): every rank draws what rank 0 draws while it is built."""
    import random
    import sys
    if {n.dist}.is_initialized() and {n.dist}.get_world_size() > 1:
        numpy = sys.modules.get("numpy")
        states = [(random.getstate(), numpy.random.get_state() if numpy else None,
                   torch.get_rng_state())]
        {n.dist}.broadcast_object_list(states, src=0)
        random.setstate(states[0][0])
        if numpy is not None:
            numpy.random.set_state(states[0][1])
        torch.set_rng_state(states[0][2])
    return make(*args, **kwargs)
'''


def _built_by_init(facts: Facts, cls: cst.ClassDef, func: cst.FunctionDef) -> bool:
    """Is `func` the class's `__init__`, or a method `__init__` calls (`self.data =
    self._negative_sampling()`: negatives drawn once, when the data set is built)?"""
    if func.name.value == "__init__":
        return True
    init = facts.method(cls, "__init__")
    return init is not None and any(dotted(c.func) == f"self.{func.name.value}"
                                    for c in facts.calls_in(init))


def _unseeded_splitter(ctx: Context, call: cst.Call) -> bool:
    """`kf.split(X, y)` where `kf = KFold(5, shuffle=True)` (or the call itself) has no
    random_state=: folds drawn from numpy's global generator."""
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "split":
        return False
    obj = call.func.value
    values: list[cst.BaseExpression] = [obj]
    if isinstance(obj, (cst.Name, cst.Attribute)):
        place = ctx.flow.place_of(obj)
        values = [a.value for t in (ctx.flow.bindings(place) if place else ())
                  for a in [ctx.facts.parent.get(ctx.facts.parent.get(t, t))]
                  if isinstance(a, cst.Assign)]
    made = [v for v in values if isinstance(v, cst.Call)
            and ctx.facts.call_name(v) in _SPLITTERS]
    if not made or len(made) != len(values):
        return False
    for value in made:
        shuffle = keyword(value, "shuffle")
        state = keyword(value, "random_state")
        if state is not None and dotted(state.value) != "None" or (
                _SPLITTERS[ctx.facts.call_name(value) or ""]
                and (shuffle is None or dotted(shuffle.value) in ("False", "None"))):
            return False
    return True


def _folds(ctx: Context, call: cst.Call) -> None:
    """`rank0_value(list(kf.split(X)))`: every rank takes rank 0's folds."""
    name = ctx.names.rank0_value
    _define(ctx, call, "rank0_value", name)
    ctx.plan.rewrite(call, lambda node: expression(f"{name}(list({code_of(node)}))"))
    ctx.plan.change(call, "data.same_split", f"`{ctx.facts.code(call)}` draws its folds "
                    "from numpy's global generator (a splitter without random_state=): "
                    "each rank would train and validate on other folds; "
                    f"`{name}(list(...))`: every rank takes rank 0's folds")


def _drawn(ctx: Context, call: cst.Call, helper: str) -> None:
    """`rank0_value(<draw>)`, `rank0_split(<split>)`."""
    n = ctx.names
    name = n.rank0_value if helper == "rank0_value" else n.rank0_split
    _define(ctx, call, helper, name)
    ctx.plan.rewrite(call, lambda node: expression(f"{name}({code_of(node)})"))
    _report(ctx, call, f"`{name}({ctx.facts.code(call.func)}(...))`",
            ctx.facts.call_name(call) in _VALUES)


def _shuffled(ctx: Context, call: cst.Call) -> None:
    """An in-place shuffle: every rank shuffles, then takes rank 0's order."""
    stmt = ctx.facts.statement(call)
    shuffled = dotted(call.args[0].value) if call.args else None
    if not isinstance(stmt, cst.SimpleStatementLine) or shuffled is None:
        return
    n = ctx.names
    _define(ctx, call, "rank0_value", n.rank0_value)
    line = f"{shuffled}[:] = {n.rank0_value}({shuffled})"
    ctx.plan.insert_after(stmt, [statement(line + "\n")])
    _report(ctx, call, f"`{line}` after it")


def _report(ctx: Context, call: cst.Call, how: str, values: bool = False) -> None:
    what = ("each rank would draw other values (other data, another target to fit)"
            if values else "each rank would choose other data (a validation set "
            "overlapping another rank's training set)")
    ctx.plan.change(call, "data.same_split", f"`{ctx.facts.code(call.func)}(...)` draws "
                    f"without a seed, once: {what}; {how}: every rank takes rank 0's "
                    "draw")


def _define(ctx: Context, at: cst.CSTNode, helper: str, name: str) -> None:
    ctx.need("dist", at=at)
    ctx.define_helper("rank0_value", at, rank0_value_code(ctx.names))
    if helper == "rank0_split":
        ctx.define_helper("rank0_split", at, _split_code(ctx.names, name))


def _split_code(n: Names, name: str) -> str:
    return f'''

def {name}(subsets):
    """distrun: every rank takes rank 0's random split (the same samples in each part)."""
    for subset, indices in zip(subsets, {n.rank0_value}([s.indices for s in subsets])):
        subset.indices = indices
    return subsets
'''


def _made_once(ctx: Context, node: cst.CSTNode, depth: int = 4) -> bool:
    """Does `node` run once per run: outside loops, at the top level or in a plain
    function called from one place that itself runs once (a few calls deep)?"""
    facts = ctx.facts
    if any(not (isinstance(loop, cst.For) and facts.inside(node, loop.iter))
           for loop in facts.enclosing_loops(node)):
        return False  # the iterable of a `for` is made once, before its loop
    func = facts.function(node)
    if func is None:
        return True
    cls = facts.enclosing_class(func)
    if depth == 0 or cls is not None and (_per_item(ctx, cls) or func.name.value.startswith(
            "__") or func.name.value == "forward"):
        return False
    sites = ctx.flow.call_sites(func)
    return len(sites) == 1 and _made_once(ctx, sites[0][0], depth - 1)


_WRITES = {"torch.save", "numpy.save", "numpy.savez", "numpy.savetxt", "pickle.dump",
           "json.dump"}


def _every_rank_runs(ctx: Context, call: cst.Call) -> bool:
    """Is the value drawn by `call` assigned by a plain statement that no transform puts
    on rank 0 alone (a file made when missing, an output)? Its assignment is at the top
    level (or in the main guard), or in the body of a function that writes no file and
    returns nothing, never under another `if`, `with`, `try`."""
    facts = ctx.facts
    stmt = facts.statement(call)
    if not (isinstance(stmt, cst.SimpleStatementLine)
            and isinstance(stmt.body[0], (cst.Assign, cst.AnnAssign))):
        return False
    func = facts.function(call)
    for anc in facts.ancestors(stmt):
        if anc is func or isinstance(anc, cst.Module):
            break
        if isinstance(anc, cst.If) and facts.module_of(call).main_guard is anc:
            continue
        if not isinstance(anc, (cst.IndentedBlock, cst.SimpleStatementLine)):
            return False
    if func is None:
        return True
    calls = facts.calls_in(func)
    writes = any(facts.call_name(c) in _WRITES or isinstance(c.func, cst.Attribute)
                 and c.func.attr.value.startswith("write") for c in calls)
    return not writes and "return " not in facts.code(func)


def _per_item(ctx: Context, cls: cst.ClassDef) -> bool:
    """Is `cls` a Dataset, Sampler or Module (its methods run per sample, per batch)?"""
    for base in cls.bases:
        name = ctx.facts.qualname(base.value) or ""
        if name.endswith(("Dataset", "Sampler", "Module")):
            return True
    return False
