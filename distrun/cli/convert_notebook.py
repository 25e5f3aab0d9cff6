"""`distrun convert NOTEBOOK.ipynb`: the code cells become a script, converted; the
notebook itself is never rewritten."""

from __future__ import annotations

import re
from pathlib import Path

import click

from distrun.convert.options import ConvertOptions
from distrun.errors import ConvertError, InputError


def convert_notebook_command(script: str, output: str | None, in_place: bool,
                             show_diff: bool, check: bool, force: bool, report_format: str,
                             options: ConvertOptions) -> int:
    from distrun.cli import render
    from distrun.cli.convert import show_report, write_beside
    from distrun.convert import convert_source
    from distrun.convert.notebook import script_from_notebook
    from distrun.convert.report import Finding
    from distrun.files import write_atomic

    path = Path(script)
    default = path.with_name(f"{path.stem}_{options.target}.py")
    if in_place:
        raise InputError(f"{script}: a notebook is not rewritten in place",
                         f"leave --in-place out: the converted script goes to {default}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{script}: cannot read: {err.strerror}") from None
    notebook = script_from_notebook(data, script)
    if not notebook.text.strip():
        raise InputError(f"{script}: no code cells: nothing to convert")
    try:
        result = convert_source(notebook.text, script, options)
    except ConvertError as err:  # named by the cell and its line, not the script's line
        where = re.match(rf"{re.escape(script)}:(\d+):", err.message)
        found = notebook.where.get(int(where[1])) if where else None
        if where is None or found is None:
            raise
        raise ConvertError(f"{script}:cell {found[0]}:{found[1]}:" + err.message[where.end():],
                           err.hint) from None
    for number, line, what, text in notebook.commented:
        at = next(k for k, v in notebook.where.items() if v == (number, line))
        shell = what == "shell command"
        result.findings.append(Finding(
            at, "notebook.magic", "warning" if shell else "info", f"{what}, not Python: `{text}` "
            "commented out" if "kept" not in what else f"{what} (`{text}`)",
            "run it yourself before launching" if shell else ""))
    written: str | None = None
    stream = output == "-" or show_diff
    if check or show_diff or result.status == "unsupported":
        pass
    elif output == "-":
        click.echo(result.output, nl=False)
    elif result.changed or output is not None:
        target = output or str(default)
        write_beside(result.files, target, force, check_only=True)
        write_atomic(target, result.output.encode(), backup=force, force=force)
        write_beside(result.files, target, force)
        written = target
    if show_diff:
        click.echo(render.unified_diff(notebook.text, result.output,
                                       f"{script} (code cells)"), nl=False)
    return show_report(result, script, written, report_format, stream, check, notebook.where)
