"""A stand-in for python-fire (not installed here): `fire.Fire(fn)` calls fn with the
command line's `--name value` pairs (values read as Python literals where they parse,
`--name=value` too), as Fire does for a function."""
import ast
import sys


def _value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def Fire(component=None, command=None, name=None):
    argv = list(sys.argv[1:] if command is None else command)
    kwargs = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            raise SystemExit(f"fire shim: unexpected argument {arg!r}")
        key = arg[2:].replace("-", "_")
        if "=" in key:
            key, text = key.split("=", 1)
            i += 1
        else:
            text = argv[i + 1]
            i += 2
        kwargs[key] = _value(text)
    return component(**kwargs)
