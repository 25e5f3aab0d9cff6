"""Training loaders built where the converter cannot see a DataLoader call (part of the
data transform): a factory read from a config (`config.init_obj('data_loader', ...)`),
a DataLoader subclass, a helper of another package. They are rebuilt where they are
bound, before they reach training:

    data_loader = config.init_obj("data_loader", module_data)
    ...                                              (other uses of the loader as it is)
    data_loader = shard_loader(data_loader)          (accelerate: accelerator.prepare)
    trainer = Trainer(model, ..., data_loader=data_loader)

`shard_loader` (defined with the setup) makes the same DataLoader over the same dataset
with a DistributedSampler that keeps its shuffle, its batch size and its workers. Its
epoch loop is out of sight (in a Trainer of another module, say), so no `set_epoch` can
be placed: its sampler (`AutoEpochSampler`) moves to the next epoch after each pass, so
each pass has a new order, as `set_epoch(epoch)` would give. A loader it cannot rebuild
(not a DataLoader, an IterableDataset, a sampler of its own) stops the script at once
with the reason, rather than training every rank on all of it. A batch iterator of the
project (a class with `__iter__` that is no DataLoader, a generator function) is left to
batches.py, which deals its batches out by rank.
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional
from distrun.convert.build import append_keyword, code_of, expression, statement
from distrun.convert.context import Context
from distrun.convert.idioms import TrainLoop, origin_names, unwrap_iter
from distrun.convert.names import Names
from distrun.convert.object_flow import Place
from distrun.convert.transforms.auto_epoch import define_auto_epoch
from distrun.convert.transforms.batch_samplers import groups_by_class, sampler_made
from distrun.convert.transforms.batch_samplers import helper_code as batch_sampler_code
from distrun.convert.transforms.batches import made_by_hand
from distrun.convert.transforms.own_samplers import project_sampler, sized_by_batch

_LOADER = re.compile(r"loader|(^|_)dl$", re.IGNORECASE)


def rebuild_unseen_loaders(ctx: Context, loops: list[TrainLoop], seen: set[str]) -> set[str]:
    """Rebuild the loaders of training loops whose DataLoader call is not among `seen`
    (the names of the loaders built in the project); returns the names they go by."""
    facts, flow = ctx.facts, ctx.flow
    rebuilt: set[str] = set()
    done: set[int] = set()
    for tl in loops:
        names = origin_names(facts, tl.loader, facts.scope(tl.loop))
        if names & seen:
            continue
        expr = _loader_expression(facts, tl)
        place = flow.place_of(expr) if expr is not None else None
        if place is None:
            continue
        members = flow.component(place)
        for member in members:
            for target in flow.bindings(member):
                assign = _assignment(facts, target)
                stmt = facts.statement(target)
                name = dotted(target)
                if (not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call)
                        or name is None or not _LOADER.search(name.rsplit(".", 1)[-1])
                        or name.rsplit(".", 1)[-1] not in names
                        or stmt is None or id(stmt) in done
                        or _derived(ctx, assign.value, members)
                        or made_by_hand(ctx, assign.value)):  # batches.py deals them out
                    continue
                done.add(id(stmt))
                _rebuild(ctx, stmt, name, tl.loop)
                rebuilt |= names | {name.rsplit(".", 1)[-1]}
    return rebuilt


def _assignment(facts: Facts, target: cst.CSTNode) -> cst.CSTNode | None:
    """The statement part that binds `target`: `x = ...`, or `a, x, b = ...` (a helper
    returning the loaders of every split)."""
    node = facts.parent.get(target, target)
    while isinstance(node, (cst.Element, cst.Tuple, cst.List)):
        node = facts.parent.get(node, node)
    return facts.parent.get(node)


def _derived(ctx: Context, value: cst.Call, members: set[Place]) -> bool:
    """Is `value` made from the loader itself (`inf_loop(data_loader)`)? Then the loader
    is rebuilt where it comes from, not here."""
    return any((p := ctx.flow.place_of(arg.value)) is not None and p in members
               for arg in value.args)


def _loader_expression(facts: Facts, tl: TrainLoop) -> cst.BaseExpression | None:
    """The loader as the loop writes it (`self.data_loader` in `enumerate(...)`, also
    through a name bound to a wrapper: `tr_iter = iter(tr_dataloader)`, `tqdm(tr_iter)`)."""
    node = unwrap_iter(facts, tl.loop.iter)
    while isinstance(node, cst.Call) and node.args:
        node = node.args[0].value
    return node if dotted(node) == tl.loader else None


def _rebuild(ctx: Context, bound: cst.BaseStatement, name: str, loop: cst.For) -> None:
    """`name = shard_loader(name)` after `bound`, before the first statement of its block
    that hands the loader on or iterates it."""
    facts = ctx.facts
    block = facts.parent.get(bound)
    siblings = list(getattr(block, "body", []))
    at, before = bound, False
    for stmt in siblings[siblings.index(bound) + 1:] if bound in siblings else []:
        if facts.inside(loop, stmt) or _hands_on(ctx, stmt, name):
            at, before = stmt, True
            break
    call = shard_loader_call(ctx, name, bound)
    new = [statement(f"{name} = {call}\n")]
    if before:
        ctx.plan.insert_before(at, new)
    else:
        ctx.plan.insert_after(at, new)
    ctx.plan.change(bound, "data.rebuild_loader",
                    f"`{name}` is a training loader built where no DataLoader "
                    f"call shows (`{facts.code(_value(bound))}`): rebuilt with `{call}` "
                    "before it is used for training, each rank reading its own part, a new "
                    "shuffle at each pass; it stops with the reason if it cannot be" + (
                        ". A batch sampler of its own is dealt out in whole batches (the "
                        "project's batches are grouped by class): a step trains on "
                        "WORLD_SIZE of them" if "whole_batches" in call else ""))


def shard_loader_call(ctx: Context, loader: str, at: cst.CSTNode) -> str:
    """The expression that rebuilds `loader` sharded: the target's own (accelerate's
    `prepare`), else the `shard_loader` helper, then defined with the setup of `at`'s
    module."""
    call = ctx.target.prepare_loader(ctx, loader)
    if call is None:
        batchy = batch_samplers(ctx.facts)
        whole = ", whole_batches=True" if batchy and groups_by_class(ctx.facts) else ""
        call = f"{ctx.names.shard_loader}({loader}{whole})"
        ctx.need("sampler", at=at)
        define_auto_epoch(ctx, at)
        if batchy:
            ctx.need("dist", at=at)
            ctx.define_helper("rank_share_batches", at, batch_sampler_code(ctx.names))
        ctx.define_helper("shard_loader", at, helper_code(ctx.names, batchy))
    return call


def batch_samplers(facts: Facts) -> bool:
    """Does the project give a DataLoader a batch sampler (`batch_sampler=`)?"""
    return any(keyword(c, "batch_sampler") is not None for c in facts.calls
               if (facts.call_name(c) or "").endswith("DataLoader"))


def _value(stmt: cst.BaseStatement) -> cst.CSTNode:
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    return small.value if isinstance(small, cst.Assign) else stmt


def _hands_on(ctx: Context, stmt: cst.CSTNode, name: str) -> bool:
    """Does `stmt` pass `name` to a call (a trainer, a training function)?"""
    return any(dotted(arg.value) == name for call in ctx.facts.calls_in(stmt)
               for arg in call.args)


_WITH_REPLACEMENT = {"torch.utils.data.RandomSampler": 0,
                     "torch.utils.data.sampler.RandomSampler": 0,
                     "torch.utils.data.WeightedRandomSampler": 1,
                     "torch.utils.data.sampler.WeightedRandomSampler": 1}


def draw_per_rank(ctx: Context, sampler: cst.Call, loader: cst.Call) -> bool:
    """A sampler drawing with replacement (`RandomSampler(ds, replacement=True)`,
    `WeightedRandomSampler`) cannot be split: each rank draws its own share instead, from
    a generator seeded with its rank (`num_samples // WORLD_SIZE` each). True if done."""
    facts, n = ctx.facts, ctx.names
    name = facts.call_name(sampler) or ""
    if name not in _WITH_REPLACEMENT or keyword(sampler, "generator") is not None:
        return False
    replacement = keyword(sampler, "replacement")
    weighted = name.endswith("WeightedRandomSampler")
    if (replacement is None and not weighted) or (
            replacement is not None and dotted(replacement.value) != "True"):
        return False
    args = positional(sampler)
    count = keyword(sampler, "num_samples") or (args[1] if weighted and len(args) > 1 else None)
    seed = f"torch.Generator().manual_seed(torch.initial_seed() + {n.rank})"

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        node = append_keyword(node, "generator", expression(seed))
        if count is None and args:
            return append_keyword(node, "num_samples", expression(
                f"len({code_of(node.args[0].value)}) // {n.world_size}"))
        return node

    per_batch = count is not None and sized_by_batch(ctx, loader, count.value)
    if count is not None and not per_batch:
        ctx.plan.rewrite(count.value, lambda v: expression(f"({code_of(v)}) // {n.world_size}"))
    ctx.plan.rewrite(sampler, rewrite)
    ctx.plan.shards_batches(sampler)
    share = ("num_samples as the script computes it from the loader's batch size (now "
             "each rank's batch: as many steps as the original takes)" if per_batch else
             f"num_samples // {n.world_size} (the same number of samples per epoch in all)")
    ctx.plan.change(sampler, "data.sampler_with_replacement",
                    f"`{facts.code(sampler.func)}` draws with replacement: each rank draws "
                    f"its own {share}, from a generator seeded with its rank")
    return True


_SHAREABLE = frozenset({
    "torch.utils.data.SubsetRandomSampler", "torch.utils.data.sampler.SubsetRandomSampler",
    "torch.utils.data.RandomSampler", "torch.utils.data.sampler.RandomSampler",
    "torch.utils.data.SequentialSampler", "torch.utils.data.sampler.SequentialSampler",
})
SHAREABLE = _SHAREABLE  # (whole_loaders.py undoes what share_sampler does)


def share_sampler(ctx: Context, loader: cst.Call, sampler: cst.BaseExpression) -> bool:
    """A training loader given a sampler of torch's that draws without replacement
    (`SubsetRandomSampler(train_idx)`, `RandomSampler(ds)`): every rank draws the same
    order (seeded with the epoch), then takes every WORLD_SIZE-th index of it. True if
    done (the sampler, or the name it is bound to, is one of those)."""
    facts, n = ctx.facts, ctx.names
    made = sampler_made(facts, loader, sampler)
    if isinstance(made, cst.Call) and facts.call_name(made) not in _SHAREABLE:
        made = _returned_sampler(ctx, made) or made  # `sampler=get_sampler(labels, n)`
    own = isinstance(made, cst.Call) and project_sampler(ctx, made)
    if not isinstance(made, cst.Call) or facts.call_name(made) not in _SHAREABLE and not own:
        return False
    replacement = keyword(made, "replacement")
    if replacement is not None and dotted(replacement.value) != "False":
        return False
    ctx.need("torch", "dist", at=loader)
    ctx.define_helper("rank_share", loader, share_code(n))
    for arg in made.args:  # `InfiniteSampler(len(data), cfg.iteration * cfg.l_batch_size)`
        if sized_by_batch(ctx, loader, arg.value):
            ctx.plan.rewrite(arg.value, lambda v: expression(f"({code_of(v)}) * {n.world_size}"))
            ctx.plan.change(arg.value, "data.sampler_count", f"`{facts.code(arg.value)}` "
                            "counts samples by the loader's batch size, now each rank's: x "
                            f"{n.world_size}, so the ranks share out as many steps as the "
                            "original takes (not 1/WORLD_SIZE of them)")
    ctx.plan.rewrite(sampler, lambda node: expression(f"{n.rank_share}({code_of(node)})"))
    alike = ("draws its order as the script does (torch's generator starts alike on "
             "every rank; a seed the script sets is the same on each)" if own else
             "draws its order alike (seeded with the epoch)")
    ctx.plan.change(loader, "data.share_sampler", f"the loader's own sampler "
                    f"`{facts.code(made.func)}(...)` -> `{n.rank_share}(...)`: every rank "
                    f"{alike} and takes every WORLD_SIZE-th index of it. Each rank now "
                    "reads 1/WORLD_SIZE of the data: the global batch is batch_size x "
                    "WORLD_SIZE")
    ctx.plan.shards_batches(loader)
    return True


def _returned_sampler(ctx: Context, call: cst.Call) -> cst.Call | None:
    """The sampler a function of the project returns (`return SubsetRandomSampler(idx)`,
    or the name it binds it to), the same construction at every return."""
    facts = ctx.facts
    found = ctx.flow.callee(call)
    func = found[0] if found is not None else facts.local_definition(call)
    if func is None and isinstance(call.func, cst.Name):  # a function defined in the caller
        nested = [f for f in facts.function_defs if f.name.value == call.func.value
                  and facts.function(f) is facts.function(call)]
        func = nested[0] if len(nested) == 1 else None
    if not isinstance(func, cst.FunctionDef):
        return None
    made = set()
    for ret in facts.returns:
        if facts.function(ret) is not func:
            continue
        if ret.value is None:
            return None
        value: cst.BaseExpression = ret.value
        if isinstance(value, cst.Name):
            values = [a.value for a in facts.assigns if isinstance(a, cst.Assign)
                      and facts.function(a) is func and any(
                          isinstance(t.target, cst.Name) and t.target.value == value.value
                          for t in a.targets)]
            value = values[0] if len(values) == 1 else value
        if not isinstance(value, cst.Call) or facts.call_name(value) not in _SHAREABLE:
            return None
        made.add(value)
    return made.pop() if len(made) == 1 else None


def share_code(n: Names) -> str:
    return f'''

class {n.rank_share}(torch.utils.data.Sampler):
    """distrun: `sampler`'s order drawn alike on every rank (its generator seeded with the
    epoch), each rank taking every WORLD_SIZE-th index, padded to equal shares. The
    original's draw is made too, from its own generator (torch's when it had none), so
    the random numbers drawn after each pass (a model built later) are the original's.
    Any other attribute (`indices`, `weights`, `num_samples`) is `sampler`'s."""

    def __init__(self, sampler, seed=0):
        self.sampler, self.seed, self.epoch = sampler, seed, 0
        self.own = getattr(sampler, "generator", None)

    def __getattr__(self, name):
        if name in ("sampler", "seed", "epoch", "own"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        if hasattr(self.sampler, "generator"):
            self.sampler.generator = self.own
            for _ in self.sampler:  # the original's draw, left unused
                pass
            self.sampler.generator = torch.Generator().manual_seed(self.seed + self.epoch)
        indices = list(self.sampler)
        self.epoch += 1  # the next pass draws another order, set_epoch or not
        world = {n.dist}.get_world_size() if {n.dist}.is_initialized() else 1
        rank = {n.dist}.get_rank() if {n.dist}.is_initialized() else 0
        share = -(-len(indices) // world)
        indices += (indices * world)[:share * world - len(indices)]
        return iter(indices[rank:share * world:world])

    def __len__(self):
        world = {n.dist}.get_world_size() if {n.dist}.is_initialized() else 1
        return -(-len(self.sampler) // world)
'''


def helper_code(n: Names, batchy: bool = False) -> str:
    """`shard_loader`; `batchy`: also for a loader given a batch sampler of its own."""
    own = f'''
    if isinstance(loader.batch_sampler, {n.rank_share_batches}):
        return loader  # already dealt out
    if loader.batch_size is None:  # a batch sampler of its own: its batches dealt out
        return {n.shard_loader_class}(loader, data.DataLoader(
            loader.dataset, batch_sampler={n.rank_share_batches}(
                loader.batch_sampler, whole=whole_batches),
            num_workers=loader.num_workers, collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory, timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn, prefetch_factor=loader.prefetch_factor,
            persistent_workers=loader.persistent_workers,
        ))''' if batchy else ""
    return f'''

def {n.shard_loader}(loader{", whole_batches=False" if batchy else ""}):
    """distrun: `loader` again, each rank reading its own part (same batch size, shuffle)."""
    data = torch.utils.data
    if not isinstance(loader, data.DataLoader) or isinstance(loader.dataset, data.IterableDataset):
        raise TypeError(f"distrun: a {{type(loader).__name__}} is not a DataLoader over a "
                        "map-style dataset: shard its data yourself (each rank must read its "
                        "own part)")
    if isinstance(loader.sampler, {n.sampler}):
        return loader  # already sharded{own}
    shuffle = isinstance(loader.sampler, data.RandomSampler)
    if loader.batch_size is None or not (
            shuffle or isinstance(loader.sampler, data.SequentialSampler)):
        raise TypeError("distrun: this DataLoader has a sampler of its own: shard it "
                        "yourself (each rank must read its own part)")
    return {n.shard_loader_class}(loader, data.DataLoader(
        loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last,
        sampler={n.auto_epoch}(loader.dataset, shuffle=shuffle),
        num_workers=loader.num_workers, collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory, timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn, prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    ))


def {n.shard_loader_class}(loader, new):
    """distrun: `new` of `loader`'s own class (a DataLoader subclass of the project), with
    the attributes it set (its MEAN, STD...); refused where the class makes its batches
    itself (its own `__iter__` or `__len__` would not read the new sampler)."""
    data = torch.utils.data
    if type(loader) is data.DataLoader:
        return new
    if any(getattr(type(loader), m) is not getattr(data.DataLoader, m)
           for m in ("__iter__", "__len__")):
        raise TypeError(f"distrun: {{type(loader).__name__}} makes its batches itself: shard "
                        "its data yourself (each rank must read its own part)")
    for key, value in vars(loader).items():
        new.__dict__.setdefault(key, value)
    new.__class__ = type(loader)
    return new
'''
