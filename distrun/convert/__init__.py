"""Single-GPU script -> DistributedDataParallel script, by syntax-tree rewriting (LibCST).

`convert_source(text)` returns a `ConvertResult`: the new text, every change and
every finding with its line. It never prints, never exits, never writes files.
"""

from __future__ import annotations

from distrun.convert.options import ConvertOptions
from distrun.convert.report import Change, ConvertResult, Finding
from distrun.errors import ConvertError

__all__ = ["Change", "ConvertOptions", "ConvertResult", "Finding", "convert_source"]


def convert_source(source: str, filename: str = "<string>",
                   options: ConvertOptions | None = None) -> ConvertResult:
    """Convert the text of a script. Raises ConvertError if it is not valid Python."""
    import libcst as cst

    from distrun.convert.pipeline import run

    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as err:
        raise _syntax_error(source, filename, err) from None
    except RecursionError:
        raise ConvertError(f"{filename}: too deeply nested to parse") from None
    return run(source, module, options or ConvertOptions())


def _syntax_error(source: str, filename: str, err: Exception) -> ConvertError:
    """Name the line as Python itself does (LibCST's positions can be one line late)."""
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as syntax:
        where = f"{filename}:{syntax.lineno}:{syntax.offset or 1}"
        return ConvertError(f"{where}: not valid Python: {syntax.msg}",
                            "fix the syntax error, then convert again")
    except ValueError as value_error:  # e.g. null bytes
        return ConvertError(f"{filename}: not valid Python: {value_error}")
    return ConvertError(f"{filename}: the parser cannot read this file ({err})",
                        "this Python syntax is not supported by LibCST yet")
