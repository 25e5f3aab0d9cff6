"""Scripts that start their own DDP workers with `mp.spawn`: rewritten for a launcher.

The pattern of the DDP tutorials (and of the users' own notes):

    def main(rank, world_size, epochs):          def main(rank, world_size, epochs):
        os.environ["MASTER_ADDR"] = "localhost"  ->  os.environ.setdefault("MASTER_ADDR",
        os.environ["MASTER_PORT"] = "12355"              "localhost")   (the launcher's wins)
        dist.init_process_group("nccl",               dist.init_process_group(
            rank=rank, world_size=world_size)             "nccl" if torch.cuda.is_available()
        torch.cuda.set_device(rank)                       else "gloo", rank=rank, ...)
        model = DDP(Net().to(rank),                   (the devices: see device_aware.py)
                    device_ids=[rank])
        ...
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size, 5),     ->  main(RANK, WORLD_SIZE, 5)
             nprocs=world_size)

Started by torchrun (`distrun launch --nproc-per-node N`), each process calls the worker
once with its global rank and the job's size, read from the launcher's variables; run
alone (`python train.py`), it is a world of one. Spawned under a launcher unchanged, each
of the N processes would spawn its own group of `torch.cuda.device_count()` workers:
none on a machine without GPUs (exit 0, nothing trained), N x N with them.

Won't (left unchanged, with the reason): a spawn whose worker is not a function of the
script, or whose call is not a statement of its own.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts, keyword, positional
from distrun.convert.build import constant, expression
from distrun.convert.context import Context, Transform
from distrun.convert.object_flow import Place
from distrun.convert.syntax import string_value
from distrun.convert.transforms.detect import SPAWN
from distrun.convert.transforms.old_launcher import for_the_launcher, without_apex

_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")


def spawned_worker(facts: Facts) -> tuple[cst.Call, cst.FunctionDef] | None:
    """The spawn call and the script's function it starts, if it starts one."""
    for call in facts.calls:
        if facts.call_name(call) not in SPAWN or not positional(call):
            continue
        target = positional(call)[0].value
        info = facts.module_of(call)
        func = info.functions.get(target.value) if isinstance(target, cst.Name) else None
        if func is not None:
            return call, func
    return None


def plan_spawned(ctx: Context) -> None:
    found = spawned_worker(ctx.facts)
    assert found is not None
    spawn, worker = found
    facts, n = ctx.facts, ctx.names
    stmt = facts.statement(spawn)
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is spawn):
        ctx.refuse(spawn, "spawned.not_a_statement", f"`{facts.code(spawn.func)}(...)` is not "
                   "a statement of its own: the workers it starts cannot be called once per "
                   "process instead", "write `mp.spawn(worker, args=..., nprocs=...)` on its "
                   "own line, then convert again")
        return
    nprocs = keyword(spawn, "nprocs") or (positional(spawn)[2] if len(positional(spawn)) > 2
                                         else None)
    given = keyword(spawn, "args") or (positional(spawn)[1] if len(positional(spawn)) > 1
                                      else None)
    extra = [e.value for e in given.value.elements] if given is not None and isinstance(
        given.value, (cst.Tuple, cst.List)) else []
    if given is not None and not isinstance(given.value, (cst.Tuple, cst.List)):
        extra_code = [f"*{facts.code(given.value)}"]
    else:
        size = facts.code(nprocs.value) if nprocs is not None else None
        extra_code = [n.world_size if facts.code(e) == size else facts.code(e) for e in extra]
    call = f"{worker.name.value}({', '.join([n.rank, *extra_code])})"
    ctx.plan.rewrite(spawn, lambda _n: expression(call))
    ctx.plan.change(spawn, "spawned.one_worker_per_process", f"`{facts.code(spawn.func)}("
                    f"{worker.name.value}, ...)` -> `{call}`: the launcher starts the "
                    "processes (distrun launch --nproc-per-node N), each runs the worker once "
                    "with its rank and the job's size")
    _rendezvous_from_launcher(ctx)
    _rank_and_size_from_launcher(ctx)
    without_apex(ctx)
    params = worker.params.params
    for_the_launcher(ctx, [Place(worker, params[0].name.value)] if params else [], rank=True)


COMPLETE = Transform("spawned", plan_spawned)


def _rendezvous_from_launcher(ctx: Context) -> None:
    """`os.environ["MASTER_ADDR"] = "localhost"` -> `setdefault`: the launcher's address
    and port win; run alone, the script's own still serve. A `tcp://` init_method written
    in the script -> `env://` (the launcher's)."""
    facts = ctx.facts
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        target = assign.targets[0].target
        if not (isinstance(target, cst.Subscript) and facts.qualname(target.value) ==
                "os.environ" and len(target.slice) == 1):
            continue
        index = target.slice[0].slice
        key = string_value(index.value) if isinstance(index, cst.Index) else None
        if key not in _RENDEZVOUS:
            continue
        environ, value = facts.code(target.value), facts.code(assign.value)
        new = f"{environ}.setdefault({key!r}, {value})".replace("'", '"')
        ctx.plan.rewrite(assign, lambda _n, new=new: cst.Expr(expression(new)))  # type: ignore[misc]
        ctx.plan.change(assign, "spawned.launcher_rendezvous", f"`{key}` set only when the "
                        f"launcher did not (`{new}`): the launcher's address and port win")
    for call in facts.calls:
        method = keyword(call, "init_method")
        if method is not None and (string_value(method.value) or "").startswith("tcp://"):
            ctx.plan.rewrite(method.value, lambda _n: expression('"env://"'))
            ctx.plan.change(call, "spawned.launcher_rendezvous", f"init_method "
                            f"{facts.code(method.value)} -> \"env://\": the launcher's "
                            "MASTER_ADDR and MASTER_PORT")


_GROUP = {"torch.distributed.init_process_group": ("rank", "world_size"),
          "torch.utils.data.distributed.DistributedSampler": ("rank", "num_replicas"),
          "torch.utils.data.DistributedSampler": ("rank", "num_replicas")}


def _rank_and_size_from_launcher(ctx: Context) -> None:
    """The rank and the world size the process group and the samplers are given, when
    the script computes them itself (`rank = args.nr * args.gpus + gpu`,
    `args.world_size = args.gpus * args.nodes`, for nodes it starts by hand): the
    launcher's RANK and WORLD_SIZE. A value received as a parameter already is (the
    worker is called with them)."""
    facts, flow, n = ctx.facts, ctx.flow, ctx.names
    for call in facts.calls:
        names = _GROUP.get(facts.call_name(call) or "")
        if names is None:
            continue
        for key, value in zip(names, (n.rank, n.world_size), strict=True):
            given = keyword(call, key)
            if given is None:
                continue
            place = flow.place_of(flow.strip(given.value))
            func = facts.function(call)
            if place is not None and func is not None and place.scope is func \
                    and place.code in facts.params(func, False):
                continue  # passed in: from the worker's call, which has them
            ctx.plan.rewrite(given.value, constant(cst.Name(value)))
            ctx.plan.change(given, "spawned.launcher_rank", f"`{key}={facts.code(given.value)}` "
                            f"-> `{key}={value}`: the launcher's, as every process of the job "
                            "sees it")
