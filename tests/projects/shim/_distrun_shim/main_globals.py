"""The knob DISTRUN_SHIM_MAIN_GLOBALS: module-level constants of the script run as
`__main__` replaced at run time, the file left as it is.

For a script whose loop lengths are literals of its top level (`max_iters = 3000`,
`eval_iters = 200`: karpathy's lecture scripts, no argparse): `NAME=VALUE;NAME=VALUE`
(each VALUE a Python literal). The script's top-level frame is traced, line by line,
until every NAME has been bound by the script itself; the line after its first binding
finds it in the module's globals and rebinds it to VALUE, so every later line reads
VALUE. Then tracing stops: the training runs untraced. The converter reads the file as
upstream wrote it (3000 and all); only the runs, the original's and the converted one's
alike, are shortened.

`NAME:=EXPR` rebinds NAME to EXPR evaluated in the script's globals at that moment (the
names the script has bound so far, its imports included): a model the file hard-codes
replaced by a smaller one of its own package (`net:=LeNet()` after `net = SimpleDLA()`).

DISTRUN_SHIM_MAIN_RANGE_CAP=N (read with the same trace): from the script's first line,
`range` in its globals yields at most N values (`range(...)[:N]`, still a range), for a
loop length that is a literal inside an expression, `range(start_epoch,
start_epoch+200)`: every `range` that the script's own code calls, its functions too
(other modules keep the builtin). It is put in every `__main__` top level the trace
sees, so under `launch --check` (boot.py runs the script with runpy: two `__main__`
frames) it reaches the script only while a NAME is still pending there: give it with a
NAME the script binds.

Only the first binding of each NAME is replaced (a later `max_iters = max_iters // 2`
computes from VALUE and stands). Only in a process started on a `.py` file, so not in
`python -m distrun` (convert, launch) or torchrun; there, the top level of any code run
as `__main__` is traced: the script itself, or the script that `distrun launch --check`'s
boot.py (itself started as a file) runs with runpy in a fresh `__main__`.

DISTRUN_SHIM_MAIN_PACKAGE=PKG (the same trace): a script of package PKG that imports its
siblings relatively (`from .encoder import ...`), which upstream runs as `python -m
PKG.script`, run as a file: every `__main__` top level whose file lies in a folder named
as PKG's last part gets `__package__ = PKG` before its first line, as `-m` gives it (the
folder above PKG must be on the path: the descriptor's `pythonpath`). Under `launch
--check` it reaches the script only while a NAME is still pending, as the range cap.
"""

from __future__ import annotations

import ast
import os
import sys


class _Expression:
    """The EXPR of `NAME:=EXPR`, evaluated in the script's globals when NAME is rebound."""

    def __init__(self, text):
        compile(text, "DISTRUN_SHIM_MAIN_GLOBALS", "eval")  # a syntax error fails at start-up
        self.text = text

    def value(self, namespace):
        return eval(self.text, namespace)


def parse(spec):
    """`NAME=VALUE;NAME:=EXPR;...` -> {NAME: the literal VALUE, or an _Expression}; a
    malformed pair raises at start-up."""
    values = {}
    for item in (spec or "").split(";"):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        expression = name.endswith(":")
        name = name[:-1] if expression else name
        if not sep or not name.strip().isidentifier():
            raise ValueError(f"DISTRUN_SHIM_MAIN_GLOBALS: {item!r} is not NAME=VALUE "
                             "or NAME:=EXPR")
        values[name.strip()] = (_Expression(value.strip()) if expression
                                else ast.literal_eval(value.strip()))
    return values


def _capped_range(cap):
    builtin = range

    def capped(*args):
        return builtin(*args)[:cap]

    return capped


def override(spec, argv=None, range_cap=None, package=None):
    """Installs the trace that rebinds the script's constants and, with `range_cap`,
    caps its `range`; with `package`, gives the script its package (see the module
    docstring)."""
    argv = sys.argv if argv is None else argv
    if not argv or not str(argv[0]).endswith(".py"):
        return
    pending = parse(spec)
    capped = None if range_cap is None else _capped_range(int(range_cap))

    def top_level(frame, event, arg):
        if capped is not None and frame.f_globals.get("range") is not capped:
            frame.f_globals["range"] = capped
        if event == "line":
            found = [name for name in pending if name in frame.f_globals]
            for name in found:
                value = pending.pop(name)
                frame.f_globals[name] = (value.value(frame.f_globals)
                                         if isinstance(value, _Expression) else value)
            if not pending:
                sys.settrace(None)
                return None
        elif event == "return":
            sys.settrace(None)
            return None
        return top_level

    def on_call(frame, event, arg):
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            if package and os.path.basename(os.path.dirname(
                    os.path.abspath(frame.f_code.co_filename))) == package.rpartition(".")[2]:
                frame.f_globals["__package__"] = package
            return top_level
        return None

    if pending or capped is not None or package:
        sys.settrace(on_call)
