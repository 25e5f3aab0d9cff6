"""Batches made by hand, shared out among the ranks (part of the data transform).

A training loop over batches that a function of the script makes (a generator that
yields them, a class with `__iter__`) reads no DataLoader a sampler could shard: on
every rank it would train on every batch. Its iterable is handed to `rank_batches`
(defined with the set-up): rank 0 makes the batches, as the original does, and of each
WORLD_SIZE batches in a row the RANK-th is this rank's (sent by rank 0); a last round
with fewer batches than ranks is padded with its own batches (as DistributedSampler pads
its indices), so every rank takes as many steps and no batch is left out: an epoch of
one batch trains every rank on it, the original's step.

    for x, y in get_batches(words, 512):      ->  for x, y in rank_batches(get_batches(words, 512)):
    for i, (x, y) in enumerate(train_iter):   ->  ... in enumerate(rank_batches(train_iter)):
        (train_iter holding an instance of an iterating class of the project, wherever
        it was made: a parameter, `build_iterator(...)`'s return, another module)

The same for a DataLoader over an IterableDataset of the script (a stream a sampler
cannot shard): rank 0 reads the stream, as the original does, and deals its batches; and
for a list of examples the script builds and trains on one by one (`for sentence, tags
in training_data:`, PyTorch's NLP tutorials): each rank takes one of every WORLD_SIZE.

Not a generator or class given a DataLoader, or a loader already sharded (a prefetcher
over it): the loader is what is sharded.

A step now sees WORLD_SIZE batches (the global batch is WORLD_SIZE times the script's),
taken in the original's order: with the batch size divided by WORLD_SIZE, the same
samples make one step as in the original. Rank 0's batches are pickled to the others:
for large batches, a Dataset and a DataLoader are faster.

Batches sliced from tensors inside the loop (`data[i:i + bs]`): slices.py. Won't: a
`range` of window starts (word_language_model's `get_batch`): reported (`data.no_loader`).
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, dotted
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context
from distrun.convert.idioms import (
    is_backward,
    is_optimizer_step,
    origin_names,
    steps_inside,
    unwrap_iter,
)
from distrun.convert.names import Names
from distrun.convert.object_flow import Place
from distrun.convert.transforms.loader_names import construction_names


def share_hand_made(ctx: Context, sharded_names: set[str]) -> bool:
    """Each innermost training loop over batches made by a function or class of the
    project (not a DataLoader): its iterable goes through `rank_batches`. True if any."""
    facts, n = ctx.facts, ctx.names
    done = False
    for loop in facts.for_loops:
        if not _steps_each_batch(ctx, loop):
            continue
        source = unwrap_iter(facts, loop.iter)
        maker = _batch_maker(ctx, source, sharded_names)
        if maker is None:
            continue
        shown = "..." if isinstance(source, cst.Call) else facts.code(source)
        ctx.need("itertools", "dist", at=loop)
        ctx.define_helper("rank_batches", loop, helper_code(n))
        ctx.plan.rewrite(source, lambda node: expression(f"{n.rank_batches}({code_of(node)})"))
        ctx.plan.change(loop, "data.rank_batches", f"batches made by {maker} -> "
                        f"`{n.rank_batches}({shown})`: rank 0 makes them, each "
                        "rank trains on one of every WORLD_SIZE in a row (a step sees "
                        "WORLD_SIZE batches: divide the batch size by WORLD_SIZE to train as "
                        "before)")
        ctx.plan.shards_batches(loop)
        _whole_counts(ctx, source, loop)
        done = True
    return done


_COUNT = re.compile(r"^(n|num|len|size|count|total)(_|$)|(^|_)(len|length|size|count|"
                    r"batches|steps|total)$", re.IGNORECASE)


def _whole_counts(ctx: Context, source: cst.BaseExpression, loop: cst.For) -> None:
    """`steps = epoch * train_loader.n_batches // k`, `len(train_iter)` outside the loop
    whose batches `rank_batches` deals out: a count of the whole, while each rank now
    trains on 1/WORLD_SIZE of the batches. Said where it is read (not rewritten: what the
    script counts with it is its own)."""
    facts = ctx.facts
    code = dotted(source)
    if code is None:
        return
    names = origin_names(facts, code, facts.scope(loop), 0)
    lengths = [c for c in facts.calls if facts.call_name(c) == "len" and c.args]
    nodes: list[cst.Attribute | cst.Call] = [*facts.attributes, *lengths]
    for node in nodes:
        if isinstance(node, cst.Attribute) and (not _COUNT.search(node.attr.value) or (
                isinstance(parent := facts.parent.get(node), cst.Call)
                and parent.func is node)):
            continue  # not a count (a method called: `loader.create_batches()`)
        counted = dotted(node.value if isinstance(node, cst.Attribute) else node.args[0].value)
        if counted is None or facts.inside(node, loop.body) or not origin_names(
                facts, counted, facts.scope(node), 0) & names:
            continue
        shown = facts.code(node)
        ctx.plan.finding(node, "data.whole_count", f"`{shown}` counts all the batches of "
                         f"`{code}`, but each rank now trains on 1/WORLD_SIZE of them "
                         "(`rank_batches`): a step counter, schedule or epoch count made "
                         "from it runs WORLD_SIZE times ahead of this rank's steps",
                         f"where it counts this rank's batches, divide `{shown}` by "
                         "`dist.get_world_size()`")


def _steps_each_batch(ctx: Context, loop: cst.For) -> bool:
    """Does `loop`'s own body (not a loop inside it) run a backward pass or a step (or
    call a callable object that does: `steps_inside`)?"""
    facts = ctx.facts
    return any((is_backward(c) or is_optimizer_step(c) or steps_inside(facts, ctx.flow, c))
               and next(iter(facts.enclosing_loops(c)), None) is loop
               for c in facts.calls_in(loop.body))


def _batch_maker(ctx: Context, source: cst.BaseExpression, sharded: set[str]) -> str | None:
    """How `source` makes batches by hand, said for the report, or None: a call of a
    generator function or of an iterating class of the project (`get_batches(...)`), or a
    name or attribute holding an instance of such a class wherever it was made
    (`train_iter` passed down from `train_iter = build_iterator(...)`). Not one that feeds
    on another iterable (a prefetcher over a DataLoader: that loader is sharded)."""
    facts = ctx.facts
    stream = _stream_loader(ctx, source)
    if stream is not None:
        ctx.streams_shared.add(stream)
        return (f"a DataLoader over `{ctx.stream_loaders[stream].name.value}`, an "
                "IterableDataset (a sampler cannot shard it)")
    if isinstance(source, cst.Call):
        if _feeds_on(facts, source, sharded):
            return None
        defined = facts.local_definition(source)
        if isinstance(defined, cst.FunctionDef) and _generator(ctx, defined):
            return f"`{facts.code(source.func)}(...)`"
        if isinstance(defined, cst.ClassDef) and _makes_its_batches(ctx, defined):
            return f"`{facts.code(source.func)}(...)`"
        return None
    listed = _example_list(ctx, source)
    if listed is not None:
        return listed
    place = ctx.flow.place_of(source)
    if place is None:
        return None
    built = _list_built_by(ctx, place)
    if built is not None:
        return built
    classes = sorted(c.name.value for c in ctx.flow.instances(place)
                     if _makes_its_batches(ctx, c) and not any(
                         _feeds_on(facts, made, sharded) for made in _constructions(facts, c)))
    if not classes:
        return None
    return f"`{facts.code(source)}` (a `{'`/`'.join(classes)}` of the script)"


def _stream_loader(ctx: Context, source: cst.BaseExpression) -> cst.Call | None:
    """The DataLoader over an IterableDataset that `source` is (made there, or reaching
    the loop by a name, an attribute or a parameter), if any."""
    if isinstance(source, cst.Call):
        return source if source in ctx.stream_loaders else None
    code = dotted(source)
    if code is None or not ctx.stream_loaders:
        return None
    names = origin_names(ctx.facts, code, ctx.facts.scope(source), 0)
    return next((call for call in ctx.stream_loaders
                 if names & construction_names(ctx.facts, call)), None)


def _example_list(ctx: Context, source: cst.BaseExpression) -> str | None:
    """`for sentence, tags in training_data:` where the script binds `training_data` (in
    the loop's function or at the top of its module) only to list or tuple displays or a
    list comprehension: a list of examples (or of batches) made by hand. Not a list of
    bare names (`[(gen, opt_g), (disc, opt_d)]`: models and optimizers taken in turn)."""
    if not isinstance(source, cst.Name):
        return None
    facts = ctx.facts
    scope, module = facts.function(source), facts.module_of(source)
    values = [a.value for a in facts.assigns if isinstance(a, cst.Assign)
              and facts.module_of(a) is module and facts.function(a) in (scope, None)
              and any(isinstance(t.target, cst.Name) and t.target.value == source.value
                      for t in a.targets)]
    if not values or not all(isinstance(v, (cst.List, cst.Tuple, cst.ListComp))
                             for v in values):
        return None
    for value in values:
        if isinstance(value, (cst.List, cst.Tuple)) and (not value.elements or any(
                _only_names(e.value) for e in value.elements)):
            return None
    return f"`{source.value}`, a list of examples the script builds"


def _list_built_by(ctx: Context, place: Place) -> str | None:
    """The project's function that makes the list of batches (or examples) held at
    `place`, wherever it is passed on (`run_epoch(data.train_data, ...)`, the attribute
    set to `self.splitBatch(...)`): one that appends to a list in a loop and returns it."""
    facts, flow = ctx.facts, ctx.flow
    targets = [t for member in flow.component(place) for t in flow.bindings(member)]
    for target in sorted(targets, key=lambda t: (facts.modules.index(facts.module_of(t)),
                                                 facts.line(t))):
        assign = facts.parent.get(facts.parent.get(target, target))
        value = assign.value if isinstance(assign, cst.Assign) else None
        found = flow.callee(value) if isinstance(value, cst.Call) else None
        if value is not None and found is not None and _returns_appended_list(
                facts, found[0]):
            return f"`{facts.code(value)}`, a list the script builds"
    return None


def _returns_appended_list(facts: Facts, func: cst.FunctionDef) -> bool:
    """Does `func` return a name it binds to `[]` and appends to in a loop (not a list
    of names: models and optimizers taken in turn)?"""
    returned = {dotted(r.value) for r in facts.returns
                if facts.function(r) is func and r.value is not None}
    for name in returned - {None}:
        assert name is not None
        empty = any(isinstance(a.value, cst.List) and not a.value.elements
                    for a in facts.assigned(func, name))
        appends = [c for c in facts.calls_in(func) if isinstance(c.func, cst.Attribute)
                   and c.func.attr.value == "append" and dotted(c.func.value) == name
                   and c.args and not _only_names(c.args[0].value)
                   and next(iter(facts.enclosing_loops(c)), None) is not None]
        if empty and appends:
            return True
    return False


def _only_names(expr: cst.BaseExpression) -> bool:
    """A name, an attribute, or a tuple of them (no literal, no call)."""
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(_only_names(e.value) for e in expr.elements)
    return dotted(expr) is not None


def _generator(ctx: Context, func: cst.FunctionDef) -> bool:
    return any(isinstance(node, cst.Yield) and ctx.facts.function(node) is func
               for node in _walk(func))


def made_by_hand(ctx: Context, call: cst.Call) -> bool:
    """Does `call` make a batch iterator of the project that is no DataLoader (a
    generator function, or a class with `__iter__` deriving from no DataLoader)?
    `rank_batches` deals out its batches: a DataLoader cannot be rebuilt from it."""
    defined = ctx.facts.local_definition(call)
    if isinstance(defined, cst.FunctionDef):
        return _generator(ctx, defined)
    if not isinstance(defined, cst.ClassDef) or not _makes_its_batches(ctx, defined):
        return False
    cls: cst.ClassDef | None = defined
    while cls is not None:
        if any("DataLoader" in (ctx.facts.qualname(b.value) or "") for b in cls.bases):
            return False
        cls = ctx.flow.base_class(cls)
    return True


def _makes_its_batches(ctx: Context, cls: cst.ClassDef) -> bool:
    """A class of the project with `__iter__` (one made over a loader is told by what it
    is given: `_feeds_on`)."""
    return ctx.flow.method(cls, "__iter__") is not None


def _constructions(facts: Facts, cls: cst.ClassDef) -> list[cst.Call]:
    return [call for call in facts.calls if facts.local_definition(call) is cls]


def _feeds_on(facts: Facts, call: cst.Call, sharded: set[str]) -> bool:
    """Is a DataLoader, or a loader already sharded, among `call`'s arguments?"""
    for arg in call.args:
        code = dotted(arg.value)
        if code is not None and code in sharded:
            return True
        if isinstance(arg.value, cst.Call) and (facts.call_name(arg.value) or "").endswith(
                "DataLoader"):
            return True
    return False


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, child: cst.CSTNode) -> bool:
            found.append(child)
            return True

    node.visit(Collect())
    return found


def helper_code(n: Names) -> str:
    return f'''

def {n.rank_batches}(batches):
    """distrun: this rank's share of batches made by hand: rank 0 makes them, and of each
    WORLD_SIZE in a row the RANK-th is this rank's (a last round with fewer batches than
    ranks is padded with its own batches, as DistributedSampler pads: every rank takes
    as many steps and no batch is left out)."""
    if not {n.dist}.is_initialized() or {n.dist}.get_world_size() == 1:
        yield from batches
        return
    world, rank = {n.dist}.get_world_size(), {n.dist}.get_rank()
    made = iter(batches) if rank == 0 else None
    while True:
        group = [list({n.itertools}.islice(made, world)) if made is not None else None]
        {n.dist}.broadcast_object_list(group, src=0)
        if not group[0]:
            return
        yield group[0][rank % len(group[0])]
        if len(group[0]) < world:
            return
'''
