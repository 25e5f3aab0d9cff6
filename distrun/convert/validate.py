"""Is the script Python 3 that this interpreter accepts? If not, say where and why.

LibCST's parser accepts a little that Python refuses (Python 2's `except E, e:`), and
names some errors a line late, so the script is first compiled by Python itself. The
error is named as `file:line:col`, as Python names it; Python 2 code (print and exec
statements, `except E, e:`, `0777`, `10L`, backticks, `<>`, `ur""`, `raise E, "msg"`,
tuple parameters) is recognised and said to be Python 2.
"""

from __future__ import annotations

import re
import warnings

from distrun.errors import ConvertError

# (what Python's message says, a pattern the offending line matches or None, what it is)
_PYTHON2: tuple[tuple[str, re.Pattern[str] | None, str], ...] = (
    ("Missing parentheses in call to 'print'", None, "a print statement"),
    ("Missing parentheses in call to 'exec'", None, "an exec statement"),
    ("multiple exception types must be parenthesized",
     re.compile(r"\bexcept\s+[^:]+,\s*\w+\s*:"), "`except E, e:`"),
    ("leading zeros in decimal integer literals", None, "an octal literal like 0777"),
    ("invalid decimal literal", re.compile(r"\b\d+[lL]\b"), "a long literal like 10L"),
    ("Function parameters cannot be parenthesized", None, "a tuple parameter"),
    ("invalid syntax", re.compile(r"<>"), "the `<>` operator"),
    ("invalid syntax", re.compile(r"`"), "backticks for repr()"),
    ("invalid syntax", re.compile(r"\b[uU][rR]['\"]"), "a ur'' string"),
    ("invalid syntax", re.compile(r"^\s*raise\s+[\w.]+\s*,"), "`raise E, \"message\"`"),
)


def check_python(source: str, filename: str) -> None:
    """Raise ConvertError, naming `file:line:col`, unless Python compiles `source`."""
    try:
        with warnings.catch_warnings():  # the script's SyntaxWarnings are not ours to print
            warnings.simplefilter("ignore")
            compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as err:  # also IndentationError and TabError
        raise syntax_error(err, filename) from None
    except ValueError as err:  # null bytes
        raise ConvertError(f"{filename}: not valid Python: {err}") from None
    except (RecursionError, MemoryError):
        raise ConvertError(f"{filename}: nested too deeply for Python to compile it",
                           "split the deepest expression into several statements") from None


def syntax_error(err: SyntaxError, filename: str) -> ConvertError:
    line, column = err.lineno or 1, err.offset or 1
    message = err.msg
    text = err.text or ""
    for says, pattern, what in _PYTHON2:
        if message.startswith(says) and (pattern is None or pattern.search(text)):
            return ConvertError.at(
                filename, line, column,
                f"not valid Python 3: this looks like Python 2 ({what}): {message}",
                "port the script to Python 3 first (print(...), `except E as e:`, ...), "
                "then convert it")
    if isinstance(err, TabError):
        return ConvertError.at(filename, line, column, f"not valid Python: {message}",
                               "indent each block with tabs only or spaces only (your "
                               "editor can convert tabs to spaces), then convert again")
    return ConvertError.at(filename, line, column, f"not valid Python: {message}",
                           "fix the syntax error, then convert again")
