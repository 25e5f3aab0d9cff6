"""Downloads written by hand (part of the download transform): a function of the script
that fetches a file itself (`urllib.request.urlretrieve`, `wget.download`, `gdown`,
torch.hub's and torchvision's download helpers), then usually extracts and deletes it.
Every rank doing that at once writes, extracts and deletes the same files: one rank
deletes the archive another still reads. The call runs on rank 0 only, its result sent
to every rank:

    data_dir = download_data()      ->  data_dir = rank0_call(download_data)

`rank0_call` (defined with the setup) calls the function on rank 0, the other ranks
waiting for its result (`dist.broadcast_object_list`), which also means the files are
there when they go on. Several machines without a shared file system: only node 0 gets
the files (said in the change).

A fetch that is not in such a function (at the top of the script, in the training
function, in a function that also loads what it fetched) but in the branch of an `if`
taken when the file is missing (`if not os.path.exists(p): urlretrieve(url, p); extract;
remove`): rank 0 runs that `if` first, the other ranks wait, then find the file and skip
it (the same as a cache made when missing, checkpoint.py).

Won't: such a call in a loop, inside an expression, or when a module is imported; a fetch
on every rank outside a download function and outside an `if` of a missing file; a
function that also loads what it fetched (`torch.load`, `load_state_dict`, `.to(device)`,
a DataLoader), unless its fetch is under such an `if`: reported with the fix.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.context import Context
from distrun.convert.idioms import DATALOADER, trains
from distrun.convert.transforms.rank0_values import rank0_call_code, through_rank0

FETCHES = frozenset({
    "urllib.request.urlretrieve", "urllib.urlretrieve", "urllib.request.urlopen",
    "urllib2.urlopen", "six.moves.urllib.request.urlopen",
    "six.moves.urllib.request.urlretrieve", "requests.get", "wget.download", "gdown.download",
    "gdown.download_folder", "torch.hub.download_url_to_file",
    "torchvision.datasets.utils.download_url",
    "torchvision.datasets.utils.download_and_extract_archive",
    "torchvision.datasets.utils.download_file_from_google_drive",
})
_DEPTH = 2  # calls of the script's functions followed from the one called


def run_hand_downloads_on_rank0(ctx: Context) -> None:
    """The calls of the outermost download functions: a function that fetches (itself or
    through the script's functions it calls) and neither trains nor makes a DataLoader,
    called from one that is not such a function (no collective inside rank 0's call)."""
    facts = ctx.facts
    downloads, loading = _download_functions(ctx)
    for call in facts.calls:
        func = facts.function(call)
        if facts.call_name(call) in FETCHES and (func is None or id(func) not in downloads):
            _fetch_in_place(ctx, call, func is not None and id(func) in loading)
    for call in facts.calls:
        found = ctx.flow.callee(call)
        caller = facts.function(call)
        if found is None or id(found[0]) not in downloads or (
                caller is not None and id(caller) in downloads):
            continue
        stmt = facts.statement(call)
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(
            stmt.body) == 1 else None
        whole = isinstance(small, (cst.Assign, cst.Expr, cst.Return)) and small.value is call
        loop = next(iter(facts.enclosing_loops(call)), None)
        at_import = facts.function(call) is None and not facts.module_of(call).is_entry
        if not whole or loop is not None or at_import or any(a.star for a in call.args):
            ctx.plan.finding(call, "download.rank0_first",
                             f"`{facts.code(call.func)}(...)` downloads files by hand on every "
                             "rank at once: they can be torn or deleted under another rank",
                             f"run it on rank 0 only (`if {ctx.names.rank} == 0:`), then "
                             f"`{ctx.target.barrier(ctx, at=call)}`")
            continue
        n = ctx.names
        ctx.need("dist", at=call)
        ctx.define_helper("rank0_call", call, rank0_call_code(n))
        ctx.plan.rewrite(call, through_rank0(n.rank0_call))
        ctx.plan.change(call, "download.rank0_call",
                        f"`{facts.code(call.func)}(...)` downloads files by hand: it runs on "
                        f"rank 0 only (`{n.rank0_call}`), the other ranks waiting for its "
                        "result (on several machines without a shared file system, only "
                        "node 0 gets the files)")


def _download_functions(ctx: Context) -> tuple[set[int], set[int]]:
    """The ids of the functions that download by hand, and of those that also load."""
    fetching = [f for f in ctx.facts.function_defs if _fetches(ctx, f, 0)
                and not trains(ctx.facts, f, flow=ctx.flow)]
    downloads = {id(f) for f in fetching if not _loads(ctx, f)}
    return downloads, {id(f) for f in fetching if id(f) not in downloads}


def downloads_by_hand(ctx: Context, call: cst.Call) -> bool:
    """Does `call` run a function of the project that downloads by hand, itself or through
    the functions it calls (taken by `run_hand_downloads_on_rank0`, not also by the
    `download=` transform: rank 0's barrier around a call that broadcasts inside would
    pair a barrier with a broadcast, and hang)?"""
    found = ctx.flow.callee(call)
    return found is not None and _fetches(ctx, found[0], 0)


def _fetch_in_place(ctx: Context, call: cst.Call, loads: bool) -> None:
    """A fetch that is not a download function's (at the top of the script, in the
    training function, in a function that also loads): in the branch of an `if` taken
    when the file is missing, rank 0 runs that `if` first, the others then find the
    file; anywhere else, reported with the fix."""
    from distrun.convert.transforms.checkpoint import made_when_missing, rank0_runs_first

    facts = ctx.facts
    made = made_when_missing(facts, facts.statement(call))
    at_import = facts.function(call) is None and not facts.module_of(call).is_entry
    shown = f"`{facts.code(call.func)}(...)`"
    if made is None or at_import:
        where = ", in a function that also loads it" if loads else ""
        ctx.plan.finding(call, "download.rank0_first",
                         f"{shown} downloads a file on every rank at once{where}: it can be "
                         "torn or deleted under another rank",
                         f"download on rank 0 first (`if {ctx.names.rank} == 0:` around the "
                         f"download and its extraction, then `{ctx.target.barrier(ctx, at=call)}"
                         "`), or only when the file is missing (`if not os.path.exists(...)"
                         ":` around it: distrun makes rank 0 run that first)")
        return
    rank0_runs_first(ctx, made, ctx.target.barrier(ctx, at=call))
    ctx.plan.change(call, "download.when_missing",
                    f"{shown} downloads a file when it is missing: rank 0 runs the `if` of "
                    f"line {facts.line(made)} first (it finds no file and downloads it), the "
                    "other ranks wait, then find the file")


# What a download function must not do to run on rank 0 alone, its result pickled to the
# others: make a DataLoader, load tensors or weights, move them to a device (rank 0's).
_LOADS = frozenset({"torch.load", "torch.hub.load", "torch.hub.load_state_dict_from_url"})
_LOAD_METHODS = frozenset({"load_state_dict", "cuda", "to", "from_pretrained"})


def _loads(ctx: Context, func: cst.FunctionDef) -> bool:
    for call in ctx.facts.calls_in(func):
        name = ctx.facts.call_name(call) or ""
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
        if name in DATALOADER or name in _LOADS or method in _LOAD_METHODS:
            return True
    return False


def _fetches(ctx: Context, func: cst.FunctionDef, depth: int) -> bool:
    """Does `func` fetch (itself or through the script's functions it calls)? A fetch
    under an `if` of a missing file is not counted: rank 0 runs that `if` first where it
    is (download.when_missing, checkpoint.cache_first), and a rank0_call around it would
    wait for ranks waiting in that `if`'s barrier."""
    from distrun.convert.transforms.checkpoint import made_when_missing

    for call in ctx.facts.calls_in(func):
        if ctx.facts.call_name(call) in FETCHES and made_when_missing(
                ctx.facts, ctx.facts.statement(call)) is None:
            return True
        found = ctx.flow.callee(call)
        if found is not None and found[0] is not func and depth < _DEPTH \
                and _fetches(ctx, found[0], depth + 1):
            return True
    return False
