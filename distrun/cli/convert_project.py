"""`distrun convert` on a script that imports modules of its own folder: the project is
converted together and written as a copy of its folder (or in place, file by file)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from distrun.convert.options import ConvertOptions
from distrun.errors import EXIT_FOUND_WORK, EXIT_NOT_CONVERTED, EXIT_OK, InputError


def default_folder(root: Path, target: str) -> Path:
    """`<folder>_ddp` beside the project's folder, as the user would write it."""
    return Path(os.path.relpath(root.parent / f"{root.name}_{target}"))


def convert_project_command(script: str, output: str | None, in_place: bool, no_backup: bool,
                            show_diff: bool, check: bool, force: bool, report_format: str,
                            options: ConvertOptions, root: str | None = None) -> int:
    from distrun.cli import render, term
    from distrun.cli.convert import write_beside
    from distrun.convert.project import convert_project
    from distrun.files import write_atomic
    from distrun.tree import write_project

    if output == "-":
        raise InputError(f"{script} imports modules of its folder: the result is a folder, "
                         "not one file", "give -o DIR (or leave -o out: "
                         f"{default_folder(Path(script).resolve().parent, options.target)})")
    result = convert_project(script, options, root)
    shown = result.shown  # reports name files as the user reaches them
    written: str | None = None
    left_out: list[tuple[str, int]] = []
    files = result.entry.result.files
    if check or show_diff or result.entry.result.status == "unsupported":
        pass
    elif in_place:
        for item in result.changed:
            path = str(shown / item.source.rel)
            write_atomic(path, item.source.script.encode(item.result.output), like=path,
                         backup=not no_backup, force=True)
        write_beside(files, str(shown / result.entry.source.rel), force=True)
        written = f"{len(result.changed)} file(s) in place" if result.changed else None
    elif result.entry.result.status == "converted" or output is not None:
        out = Path(output) if output else default_folder(result.root, options.target)
        converted = {f.source.rel: f.source.script.encode(f.result.output)
                     for f in result.changed}
        copied = write_project(result.root, out, converted, force=force)
        write_beside(files, str(out / result.entry.source.rel), force=True)
        written, left_out = str(out), copied.left_out
    stream = show_diff  # the diff goes to stdout, the report then to stderr
    if show_diff:
        term.echo_diff(render.project_diff(result, shown))
    if report_format == "json":
        click.echo(render.project_json(result, shown, written, left_out), err=stream)
    else:
        text = render.project_report_text(result, shown)
        if text:
            term.echo_report(text, err=stream)
        for line in render.left_out_lines(left_out, result.root, written):
            click.echo(line, err=stream)
        click.echo(render.project_summary(result, shown, written), err=stream)
    if result.entry.result.status == "unsupported":
        return EXIT_NOT_CONVERTED
    if check and result.changed:
        return EXIT_FOUND_WORK
    return EXIT_OK
