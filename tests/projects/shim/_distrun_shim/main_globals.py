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

Only the first binding of each NAME is replaced (a later `max_iters = max_iters // 2`
computes from VALUE and stands). Only in a process started on a `.py` file, so not in
`python -m distrun` (convert, launch) or torchrun; there, the top level of any code run
as `__main__` is traced: the script itself, or the script that `distrun launch --check`'s
boot.py (itself started as a file) runs with runpy in a fresh `__main__`.
"""

from __future__ import annotations

import ast
import sys


def parse(spec):
    """`NAME=VALUE;...` -> {NAME: the literal VALUE}; a malformed pair raises at start-up."""
    values = {}
    for item in spec.split(";"):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise ValueError(f"DISTRUN_SHIM_MAIN_GLOBALS: {item!r} is not NAME=VALUE")
        values[name.strip()] = ast.literal_eval(value.strip())
    return values


def override(spec, argv=None):
    """Installs the trace that rebinds the script's constants (see the module docstring)."""
    argv = sys.argv if argv is None else argv
    if not argv or not str(argv[0]).endswith(".py"):
        return
    pending = parse(spec)

    def top_level(frame, event, arg):
        if event == "line":
            found = [name for name in pending if name in frame.f_globals]
            for name in found:
                frame.f_globals[name] = pending.pop(name)
            if not pending:
                sys.settrace(None)
                return None
        elif event == "return":
            sys.settrace(None)
            return None
        return top_level

    def on_call(frame, event, arg):
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return top_level
        return None

    if pending:
        sys.settrace(on_call)
