"""The exceptions distrun raises for user mistakes, each carrying its exit code.

Only `distrun.cli` turns them into a message and an exit status; the core raises them.

Exit codes (documented in docs/convert.md and docs/launch.md):
  0  success (also: nothing to do)
  1  `convert --check` found work to do; a launched job failed
  2  bad input: missing or unreadable file, not Python, syntax error, bad option
  3  `launch --check` found a problem in the distributed script (the job itself succeeded)
  4  `convert` left the script unconverted: it does what the target cannot convert safely
  70 internal error: a bug in distrun (DISTRUN_DEBUG=1 shows the traceback)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FOUND_WORK = 1
EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_FOUND = 3
EXIT_NOT_CONVERTED = 4
EXIT_INTERNAL = 70


class DistrunError(Exception):
    """A problem the user can fix; `hint` says how."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class InputError(DistrunError):
    """A file or option given on the command line cannot be used."""


class ConvertError(DistrunError):
    """The script cannot be converted (for example, it does not parse).

    `line` and `column` say where, when a place in the file is to blame: the message then
    starts with `FILE:LINE:COLUMN: ` and `detail` is the rest of it, so a caller that knows
    the file under another name (a notebook's cell) can say where without reading the text.
    """

    def __init__(self, message: str, hint: str | None = None, *, line: int | None = None,
                 column: int | None = None, detail: str | None = None) -> None:
        super().__init__(message, hint)
        self.line = line
        self.column = column
        self.detail = detail

    @classmethod
    def at(cls, filename: str, line: int, column: int, detail: str,
           hint: str | None = None) -> ConvertError:
        """The error at `filename:line:column`, its message `FILE:LINE:COLUMN: detail`."""
        return cls(f"{filename}:{line}:{column}: {detail}", hint, line=line, column=column,
                   detail=detail)


class LaunchError(DistrunError):
    """A job cannot be started, or it failed."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message, hint)
        self.exit_code = exit_code
