"""Files every rank would write (for the output transform): whether a call opens a file
for writing, and a file kept open made `os.devnull` on the other ranks.

The mode is read where it is written: a literal (`open(path, "w")`), or a parameter of
the function the call is in whose default is a literal and which no call of that
function (followed through the project, a class's `__init__` included) gives another
value than a literal that writes:

    class Tee:
        def __init__(self, fname, mode="a"):
            self.file = open(fname, mode)      # writes: Tee(path) everywhere
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import block_body, keyword, positional, string_value
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context

_OPENERS = frozenset({"open", "io.open", "codecs.open", "gzip.open", "bz2.open", "lzma.open",
                      "tarfile.open"})
# A mode: `open`'s letters, then tarfile's compression (`"w:gz"`, `"r|*"`). Anything else
# is not a mode (`tarfile.open("data.tar.gz")` read as a method's first argument).
_MODE = re.compile(r"[rwxabtU+]{1,4}(?:[:|][a-z0-9*]*)?")


def opens_for_writing(ctx: Context, call: cst.Call) -> bool:
    """`open(path, "w")`, `gzip.open(path, "wt")`, `path.open("w")` (pathlib: the mode
    comes first), with a mode that writes (see the module's docstring)."""
    facts = ctx.facts
    name = facts.call_name(call) or ""
    if name in _OPENERS:
        at = 1
    elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "open" \
            and "." not in name.rpartition(".")[0]:
        at = 0  # a method: `Path(...).open(mode)`, `fname.open("wt")`
    else:
        return False
    mode = keyword(call, "mode") or (call.args[at] if len(call.args) > at and
                                     call.args[at].keyword is None else None)
    if mode is None:
        return False
    if isinstance(mode.value, cst.Name):
        return _parameter_writes(ctx, call, mode.value.value)
    return _writes(string_value(mode.value))


def _writes(text: str | None) -> bool:
    return text is not None and _MODE.fullmatch(text) is not None and any(
        c in text.partition(":")[0].partition("|")[0] for c in "wax")


def _parameter_writes(ctx: Context, call: cst.Call, param: str) -> bool:
    """`param` is a parameter of the function around `call`, its default a mode that
    writes, and every call of that function passes nothing for it or such a mode."""
    facts = ctx.facts
    func = next((a for a in facts.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
    if func is None:
        return False
    default = next((p.default for p in (*func.params.params, *func.params.kwonly_params)
                    if p.name.value == param), None)
    if default is None or not _writes(string_value(default)):
        return False
    for site, is_method in ctx.flow.call_sites(func):
        given = facts.argument_for(site, func, is_method, param)
        if given is not None and not _writes(string_value(given)):
            return False
        if any(arg.star for arg in site.args):
            return False  # `*args` / `**kwargs`: not known
    return True


def kept_file(ctx: Context, call: cst.Call, block: cst.CSTNode | None) -> bool:
    """`log = open(path, "a")` kept and written later (`log.write(...)` anywhere), `with
    open(path, "a") as log:` around more than writing (an evaluation, checkpoints), or
    `pickle.dump(obj, open(path, "wb"))` (a file opened in a call's arguments): on the
    other ranks the file is `os.devnull` opened the same way, so every write, flush and
    close works and writes nothing, and the rest runs on every rank."""
    facts, rank = ctx.facts, ctx.names.rank
    if facts.call_name(call) not in ("open", "io.open"):
        return False
    holder = facts.parent.get(call)
    kept = isinstance(holder, cst.Assign) and holder.value is call and len(holder.targets) == 1
    kept = kept or isinstance(holder, cst.Arg) and holder.value is call
    around = isinstance(block, cst.With) and not (
        len(block_body(block)) == 1 and any(facts.call_name(c) == "torch.save"
                                            for c in facts.calls_in(block)))
    if not (kept or around):
        return False
    mode = keyword(call, "mode")
    args = positional(call)
    mode_code = facts.code(mode.value) if mode is not None else (
        facts.code(args[1].value) if len(args) > 1 else '"r"')
    os_name = ctx.names.os
    ctx.need("os", at=call)
    code = f"{{}} if {rank} == 0 else open({os_name}.devnull, {mode_code})"
    ctx.plan.rewrite(call, lambda n: expression(code.format(code_of(n))))
    ctx.plan.change(call, "output.rank0_file",
                    "file written by rank 0 only: the other ranks open os.devnull in its "
                    "place, so their writes go nowhere")
    return True
