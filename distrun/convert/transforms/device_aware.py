"""Distributed code written for GPUs only, made to run on CPU too (part of the completion
of scripts that are already distributed: `old_launcher`, `spawned`).

A script written for torch.distributed.launch or mp.spawn starts NCCL and puts its model
on the GPU its rank names; on a machine without GPUs it stops at once ("ProcessGroupNCCL
is only supported with GPUs", "Torch not compiled with CUDA enabled"), after
`distrun convert` said all was well. The rank's device uses become the local rank's
device, CUDA when there is one, the CPU otherwise:

    dist.init_process_group("nccl", ...)  ->  dist.init_process_group(
                                                  "nccl" if torch.cuda.is_available()
                                                  else "gloo", ...)
    torch.cuda.set_device(rank)           ->  if torch.cuda.is_available():
                                                  torch.cuda.set_device(LOCAL_RANK)
    model.cuda(rank) / model.to(rank)     ->  model.to(DEVICE)
    x.cuda()                              ->  x.to(DEVICE)
    DDP(model, device_ids=[rank])         ->  DDP(model, device_ids=[LOCAL_RANK]
                                                  if torch.cuda.is_available() else None)
    SyncBatchNorm.convert_sync_batchnorm(m) -> (... if torch.cuda.is_available() else m)
    torch.device("cuda", rank)            ->  DEVICE

`rank` is whatever the caller says names the device (`args.local_rank`, the worker's
first parameter, and where they go: `self.gpu_id`...): the local rank, so a job of
several nodes puts each process on its own node's GPU. LOCAL_RANK and DEVICE are set at
the top of the entry script from the launcher's variables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import libcst as cst

from distrun.convert.analysis import keyword, positional
from distrun.convert.build import code_of, constant, expression, statement, statements
from distrun.convert.context import Context
from distrun.convert.idioms import method_name
from distrun.convert.imports import after_first_imports, import_lines, imported_by
from distrun.convert.object_flow import Place
from distrun.convert.syntax import string_value

_INIT = frozenset({"torch.distributed.init_process_group",
                   "torch.distributed.distributed_c10d.init_process_group"})
_SET_DEVICE = frozenset({"torch.cuda.set_device"})
_DDP = frozenset({"torch.nn.parallel.DistributedDataParallel",
                  "torch.nn.parallel.distributed.DistributedDataParallel"})
BACKEND = '"nccl" if torch.cuda.is_available() else "gloo"'
_SYNC_BN = frozenset({"torch.nn.SyncBatchNorm.convert_sync_batchnorm",
                      "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm"})


def make_device_aware(ctx: Context, sources: Iterable[Place]) -> bool:
    """Rewrite NCCL-only set-up and the device uses of what flows from `sources`; True if
    the script now reads LOCAL_RANK or DEVICE (the caller defines them)."""
    facts, flow, n = ctx.facts, ctx.flow, ctx.names
    roots = {flow.root(p) for p in sources}

    def from_rank(expr: cst.BaseExpression | None) -> bool:
        place = flow.place_of(flow.strip(expr)) if expr is not None else None
        return place is not None and flow.root(place) in roots

    used = False
    for call in facts.calls:
        name = facts.call_name(call) or ""
        args = positional(call)
        if name in _INIT:
            _backend(ctx, call)
        elif name in _SET_DEVICE and args:  # always the local rank's, in such a script
            used |= _set_device(ctx, call)
        elif name in _DDP:
            used |= _device_ids(ctx, call, from_rank)
        elif name == "torch.device" and args and string_value(args[0].value) == "cuda":
            ctx.plan.rewrite(call, constant(cst.Name(n.device)))
            ctx.plan.change(call, "device.local_device", f"`{facts.code(call)}` -> "
                            f"`{n.device}`: the local rank's GPU, or the CPU without one")
            used = True
        elif name in _SYNC_BN and args:
            _sync_bn_on_gpu_only(ctx, call)
        elif method_name(call) == "cuda" and isinstance(call.func, cst.Attribute) and (
                not args or from_rank(args[0].value)):
            used |= _to_device(ctx, call)
        elif method_name(call) == "to" and isinstance(call.func, cst.Attribute) and args \
                and from_rank(args[0].value):
            used |= _to_device(ctx, call)
    return used


def _backend(ctx: Context, call: cst.Call) -> None:
    given = keyword(call, "backend") or (positional(call)[0] if positional(call) else None)
    if given is None or string_value(given.value) != "nccl":
        return
    ctx.need("torch", at=call)
    ctx.plan.rewrite(given.value, constant(expression(BACKEND)))
    ctx.plan.change(call, "device.backend", "NCCL only where there is CUDA: "
                    f"`{BACKEND}` (NCCL needs a GPU per process; gloo runs on the CPU)")


def _sync_bn_on_gpu_only(ctx: Context, call: cst.Call) -> None:
    """SyncBatchNorm runs on GPUs only (DDP refuses it on the CPU): converted when CUDA
    is there, the model kept as it is otherwise."""
    model = ctx.facts.code(positional(call)[0].value)

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        return expression(f"({code_of(node)} if torch.cuda.is_available() else {model})")

    ctx.need("torch", at=call)
    ctx.plan.rewrite(call, rewrite)
    ctx.plan.change(call, "device.local_device", "SyncBatchNorm only when there is CUDA "
                    f"(it runs on GPUs only): `{model}` kept as it is on the CPU")


def _set_device(ctx: Context, call: cst.Call) -> bool:
    stmt = ctx.facts.statement(call)
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 \
            or not isinstance(stmt.body[0], cst.Expr) or stmt.body[0].value is not call:
        return False
    code = f"{ctx.facts.code(call.func)}({ctx.names.local_rank})"
    guarded = statement(f"if torch.cuda.is_available():\n    {code}\n")

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        return guarded.with_changes(leading_lines=getattr(node, "leading_lines", ()))

    ctx.need("torch", at=call)
    ctx.plan.rewrite(stmt, rewrite)
    ctx.plan.change(call, "device.local_device", f"`{ctx.facts.code(call)}` -> `{code}` "
                    "when there is CUDA: the local rank's GPU")
    return True


def _device_ids(ctx: Context, call: cst.Call,
                from_rank: Callable[[cst.BaseExpression | None], bool]) -> bool:
    n, done = ctx.names, False
    for name in ("device_ids", "output_device"):
        arg = keyword(call, name)
        if arg is None:
            continue
        value = arg.value
        items = [e.value for e in value.elements] if isinstance(value, cst.List) else [value]
        if len(items) != 1 or not from_rank(items[0]):
            continue
        local = f"[{n.local_rank}]" if isinstance(value, cst.List) else n.local_rank
        new = f"{local} if torch.cuda.is_available() else None"
        ctx.plan.rewrite(value, constant(expression(new)))
        ctx.plan.change(value, "device.local_device", f"`{name}={ctx.facts.code(value)}` -> "
                        f"`{name}={new}`: the local rank's GPU, none on the CPU")
        done = True
    return done


def _to_device(ctx: Context, call: cst.Call) -> bool:
    assert isinstance(call.func, cst.Attribute)
    n = ctx.names
    rest = [a for a in call.args if a.keyword is not None]

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        kept = [a for a in node.args if a.keyword is not None]
        device = cst.Arg(cst.Name(n.device))
        args = [device.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(
            " ")))] + kept if kept else [device]
        return node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=args)

    ctx.plan.rewrite(call, rewrite)
    shown = ctx.facts.code(call.func)
    ctx.plan.change(call, "device.local_device", f"`{shown}(...)` -> "
                    f"`{ctx.facts.code(call.func.value)}.to({n.device}"
                    f"{', ...' if rest else ''})`: the local rank's GPU, or the CPU without one")
    return True


def place_names(ctx: Context, rank: bool, device: bool) -> None:
    """After the entry script's first imports: the imports the completion asked for, and
    RANK and WORLD_SIZE (`rank`), LOCAL_RANK and DEVICE (`device`), read from the
    launcher's variables."""
    facts, n = ctx.facts, ctx.names
    entry = facts.entry
    lines = ""
    if rank:
        lines += (f'{n.rank} = int({n.os}.environ.get("RANK", 0))\n'
                  f'{n.world_size} = int({n.os}.environ.get("WORLD_SIZE", 1))\n')
    if device:
        lines += (f'{n.local_rank} = int({n.os}.environ.get("LOCAL_RANK", 0))\n'
                  f'{n.device} = torch.device("cuda", {n.local_rank}) if '
                  'torch.cuda.is_available() else torch.device("cpu")\n')
    top = list(entry.module.body)
    at = after_first_imports(entry.module)
    ctx.need("os", *(("torch",) if lines else ()))
    new = import_lines(imported_by(top[:at]), n, ctx.imports_for(entry))
    block = statements(lines) if lines else []
    if block:
        block[0] = block[0].with_changes(leading_lines=[
            cst.EmptyLine(indent=False), cst.EmptyLine(comment=cst.Comment(
                "# distrun: this process's place in the job (the launcher sets the "
                "variables; run alone: a world of one)"))])
    if not new and not block:
        return
    if at:
        ctx.plan.insert_after(top[at - 1], [*new, *block])
    else:
        ctx.plan.insert_before(top[0], [*new, *block])


def group_for_the_launcher(ctx: Context) -> None:
    """A process group set up only when there are several GPUs (`distributed =
    torch.cuda.device_count() > 1`, NVIDIA's examples): on a machine without GPUs every
    rank would train alone on all the data, exit 0. The count that decides becomes the
    launcher's process count (WORLD_SIZE); a group gated on `torch.cuda.is_available()`
    is reported."""
    facts, n = ctx.facts, ctx.names
    for call in facts.calls:
        if facts.call_name(call) not in _INIT:
            continue
        for node in facts.ancestors(call):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                break
            if not isinstance(node, cst.If):
                continue
            for test in [node.test, *_definitions(ctx, node.test)]:
                for counted in facts.calls_in(test):
                    name = facts.call_name(counted)
                    if name == "torch.cuda.device_count":
                        new = f'int({n.os}.environ.get("WORLD_SIZE", 1))'
                        ctx.need("os", at=counted)
                        ctx.plan.rewrite(counted, constant(expression(new)))
                        ctx.plan.change(counted, "device.group_from_launcher",
                                        "the process group depended on the GPU count: "
                                        f"`{facts.code(counted)}` -> `{new}`, the launcher's "
                                        "process count, so the job is distributed on CPU "
                                        "too")
                    elif name == "torch.cuda.is_available":
                        ctx.plan.finding(counted, "device.group_from_launcher",
                                         "the process group is set up only when CUDA is "
                                         "available: without GPUs each rank trains alone",
                                         "set it up whenever the launcher started several "
                                         f"processes: `if int({n.os}.environ.get("
                                         '"WORLD_SIZE", 1)) > 1:`')


def _definitions(ctx: Context, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values assigned to the plain names `test` reads, in its function or module."""
    facts = ctx.facts
    names = {node.value for node in facts.names if facts.inside(node, test)}
    return [a.value for a in facts.assigns if isinstance(a, cst.Assign) and len(a.targets) == 1
            and isinstance(a.targets[0].target, cst.Name)
            and a.targets[0].target.value in names and facts.scope(a) is facts.scope(test)]
