"""The terminal side of the CLI: colour (only on a terminal, never with NO_COLOR), and
whether an error is to be printed as JSON too (a command asked for JSON output).

Colour follows the usual conventions: on when the stream is a terminal and TERM is not
`dumb`; `NO_COLOR` (any non-empty value) turns it off, `FORCE_COLOR` (any non-empty value)
turns it on for a pipe too. NO_COLOR wins over FORCE_COLOR.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import click

# What a coloured text is: its colour and whether it is bold.
_STYLES: dict[str, dict[str, Any]] = {
    "error": {"fg": "red", "bold": True},
    "warning": {"fg": "yellow", "bold": True},
    "ok": {"fg": "green"},
    "skip": {"fg": "bright_black"},
    "first": {"fg": "red", "bold": True},
    "note": {"fg": "cyan"},
}
_HEADS = re.compile(r"^(distrun: )(error|warning|internal error)(:)", re.MULTILINE)


class _JsonErrors:
    """Set by a command's JSON option while its arguments are parsed."""

    on = False
    report_file: str | None = None  # launch --report-json PATH: the error goes there too


json_errors = _JsonErrors()


def want_json(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """Click callback for an option that asks for JSON output (`--json`, `--report json`):
    an error is then also printed as a JSON object on standard output."""
    if value is True or value == "json":
        json_errors.on = True
    return value


def want_report_file(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """Click callback for `--report-json PATH`: an error is written there as JSON too."""
    if value:
        json_errors.report_file = str(value)
    return value


def colour(err: bool = True) -> bool:
    """Whether to colour what goes to standard error (`err`) or standard output."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = sys.stderr if err else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM") != "dumb"


def paint(text: str, kind: str, err: bool = True) -> str:
    """`text` in the colour of `kind` (error, warning, ok, skip, first, note) when colour is
    on for that stream; unchanged otherwise."""
    if not colour(err):
        return text
    return click.style(text, **_STYLES[kind])


def heads(text: str, err: bool = True) -> str:
    """`text` with each `distrun: error:` / `distrun: warning:` head coloured."""
    if not colour(err):
        return text

    def one(match: re.Match[str]) -> str:
        kind = "warning" if match[2] == "warning" else "error"
        return match[1] + click.style(match[2] + match[3], **_STYLES[kind])

    return _HEADS.sub(one, text)


# A convert report line: `FILE:LINE: severity: message` (a notebook's `FILE:cell C:LINE`),
# and the `    fix:` line under a finding.
_REPORT = re.compile(r"^([^:\n]+(?::cell \d+)?(?::\d+)?: )(error|warning|info)(:)"
                     r"|^(    )(fix:)", re.MULTILINE)
_SEVERITY = {"error": "error", "warning": "warning", "info": "note", "fix:": "ok"}


def echo_report(text: str, err: bool) -> None:
    """A convert report: each finding's severity coloured (errors red, warnings yellow,
    notes cyan) and its `fix:` green, on a terminal only."""
    if not colour(err):
        click.echo(text, err=err)
        return

    def one(match: re.Match[str]) -> str:
        if match[5]:
            return match[4] + click.style(match[5], **_STYLES["ok"])
        return match[1] + click.style(match[2] + match[3], **_STYLES[_SEVERITY[match[2]]])

    click.echo(_REPORT.sub(one, text), err=err, color=True)


def echo(text: str, err: bool = True, nl: bool = True) -> None:
    """Print `text` with its heads coloured (colour kept: `colour` already decided)."""
    click.echo(heads(text, err), err=err, nl=nl, color=colour(err))


def echo_diff(text: str) -> None:
    """A unified diff on standard output: removed lines red, added green, hunks cyan, on a
    terminal only (a diff piped to `patch` or a file stays plain)."""
    if not colour(err=False):
        click.echo(text, nl=False)
        return
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            out.append(click.style(line, bold=True))
        elif line.startswith("+"):
            out.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            out.append(click.style(line, fg="red"))
        elif line.startswith("@@"):
            out.append(click.style(line, fg="cyan"))
        else:
            out.append(line)
    click.echo("".join(out), nl=False, color=True)
