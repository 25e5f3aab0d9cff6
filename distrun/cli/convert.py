"""`distrun convert`: the command line read into a `ConvertRequest`, the core's outcome
written and shown, for a script, a project and a notebook alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from distrun.cli.term import want_json
from distrun.convert.options import OPTIONS
from distrun.errors import InputError

if TYPE_CHECKING:
    from distrun.convert.request import ConvertOutcome, ConvertRequest, OutputMode

F = TypeVar("F", bound=Callable[..., Any])


def convert_options(command: F) -> F:
    """The conversion options, one click option per entry of `convert.options.OPTIONS`."""
    for option in reversed(OPTIONS):
        if option.is_flag:
            command = click.option(option.flag, option.field, is_flag=True,
                                   help=option.help)(command)
        elif option.metavar is not None:
            command = click.option(option.flag, option.field, metavar=option.metavar,
                                   default=None, help=option.help)(command)
        else:
            command = click.option(option.flag, option.field, type=click.Choice(option.choices),
                                   default=option.default,
                                   show_default=option.default is not None,
                                   help=option.help)(command)
    return command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("script", type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", "output", metavar="OUT",
              help="Write the result to OUT ('-': stdout); missing folders are made. OUT "
              "ending in / (for a script or a notebook, also an existing folder) is a "
              "folder to write into: OUT/<stem>_ddp.py, for a project the copy "
              "OUT/<folder>_ddp. A project's OUT without / is the copy itself, never a "
              ".py file. Default: <stem>_ddp.py beside SCRIPT; for a project, the folder "
              "<folder>_ddp beside its folder.")
@click.option("--in-place", is_flag=True,
              help="Rewrite SCRIPT (and the project's changed modules) itself; the "
              "originals are kept as FILE.orig.")
@click.option("--no-backup", is_flag=True, help="With --in-place: keep no FILE.orig.")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if SCRIPT needs converting, 0 if not.")
@click.option("--force", is_flag=True, help="Replace an existing OUT (kept as OUT.orig).")
@click.option("--root", metavar="DIR", type=click.Path(file_okay=False, exists=True),
              help="The project's top folder, when SCRIPT sits deeper in it: its packages "
              "(installed with `pip install -e .`, or on PYTHONPATH) are converted too, and "
              "the copy is of DIR.")
@convert_options
@click.option("--report", "report_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, callback=want_json, help="Format of the change report "
              "(json: an error is a JSON object on stdout too).")
def convert(script: str, output: str | None, in_place: bool, no_backup: bool, show_diff: bool,
            check: bool, force: bool, root: str | None, report_format: str,
            **chosen: Any) -> int:
    """Rewrite a single-GPU PyTorch SCRIPT into a DistributedDataParallel script.

    When SCRIPT imports modules of its own folder (utils.py, models/, a trainer package),
    they are converted with it: the result is a copy of the folder, SCRIPT's folder name
    + _ddp, with the changed modules rewritten (or, with --in-place, the changed files
    themselves, each kept as FILE.orig). A notebook (NAME.ipynb) gives NAME_ddp.py from
    its code cells; beside it in that copy when it imports modules of its folder.

    \b
    Every change and every warning is reported as FILE:LINE. Exit codes:
      0  converted (or already distributed: nothing to do)
      1  --check: the script needs converting
      2  bad input: missing, empty or binary file, not Python 3, syntax error,
         OUT would overwrite SCRIPT, OUT cannot be written
      4  not converted: the script does what the target cannot convert safely
         (starts its own processes; for DeepSpeed: see the report), nothing written
    \b
    Examples:
      distrun convert train.py                 # writes train_ddp.py
      distrun convert train.py --diff          # show what would change
      distrun convert train.py --in-place      # train.py rewritten, train.py.orig kept
      distrun convert train.py --check         # for CI / pre-commit
    """
    from distrun.convert.request import (
        ConvertRequest,
        convert_request,
        detect_input,
        write_outcome,
    )
    from distrun.convert.targets import options_from

    mode = _mode(output, in_place, no_backup, show_diff, check)
    try:
        options = options_from(chosen)
    except ValueError as err:
        raise InputError(str(err), "add the --to it applies to, or leave the option "
                         "out") from None
    _exists(script)
    try:
        kind = detect_input(script, root)
        if mode == "file" and kind == "project":
            mode = "folder"
        request = ConvertRequest(script, kind, mode, output=None if output == "-" else output,
                                 force=force, backup=not no_backup, root=root,
                                 report_format="json" if report_format == "json" else "text",
                                 options=options)
        with _locked(request) as cleaned:
            outcome = convert_request(request)
            left_out = write_outcome(outcome)
    except RecursionError:  # code nested deeper than a reader of the source can follow
        raise InputError(f"{script} (or a module it imports): code nested too deeply to be "
                         "read: nothing written", "split the most deeply nested expression "
                         "or block into parts") from None
    for line in cleaned:
        click.echo(f"distrun: {line}", err=True)
    return show(outcome, left_out)


@contextmanager
def _locked(request: ConvertRequest) -> Iterator[list[str]]:
    """Hold the lock on the folder the run writes into (distrun.writes), from
    before the input is read until the result is written; what a killed run had left
    there is undone first (the lines saying so)."""
    from pathlib import Path

    from distrun.write_lock import lock_folder, locked

    where = lock_folder(request.source, request.mode, request.output,
                        request.kind == "project", request.root)
    if where is None:
        yield []
        return
    folder, deep = where
    with locked(Path(folder), on_wait=lambda line: click.echo(f"distrun: {line}", err=True),
                deep=deep) as held:
        yield held.cleaned


def _mode(output: str | None, in_place: bool, no_backup: bool, show_diff: bool,
          check: bool) -> OutputMode:
    """The output mode the flags ask for ("file" for a result written to a file or a
    folder); InputError for flags that do not go together."""
    modes = [m for m, on in (("-o", output is not None), ("--in-place", in_place),
                             ("--diff", show_diff), ("--check", check)) if on]
    if len(modes) > 1:
        raise InputError(f"{' and '.join(modes)} cannot be used together",
                         "choose one of -o OUT, --in-place, --diff, --check")
    if no_backup and not in_place:
        raise InputError("--no-backup only makes sense with --in-place")
    if check:
        return "check"
    if show_diff:
        return "diff"
    if in_place:
        return "in-place"
    return "stdout" if output == "-" else "file"


def _exists(script: str) -> None:
    """A SCRIPT that does not exist: the closest name beside it, if one is close; one
    that is not a file (a pipe, a device) is refused before anything reads it."""
    from pathlib import Path

    from distrun.launch.validate import closest_file

    path = Path(script)
    if path.exists():
        if not path.is_dir() and not path.is_file():  # a pipe would block the read forever
            raise InputError(f"{script}: not a regular file (a pipe or a device), not a "
                             "Python script", "convert the file itself")
        return
    close = closest_file(path)
    raise InputError(f"{script}: no such file", f"did you mean {close}?" if close
                     else "check the path")


def _gpus() -> int:
    """GPUs here, from nvidia-smi (no torch import)."""
    from distrun.config.init import gpu_count

    return gpu_count()


def show(outcome: ConvertOutcome, left_out: list[tuple[str, int]]) -> int:
    """Print the outcome of any input: the script (stdout mode) or the diff on stdout,
    then the report (text or JSON; on stderr when stdout holds the script or the diff)
    and, after a conversion written to a file, how to launch it. The exit code."""
    from distrun.cli import render, term

    request, result = outcome.request, outcome.result
    err = request.streams
    if outcome.stdout is not None:
        click.echo(outcome.stdout, nl=False)
    if request.mode == "diff":
        term.echo_diff(_diff(outcome))
    if outcome.project is not None:
        project, shown = outcome.project, outcome.project.shown
        if request.report_format == "json":
            click.echo(render.project_json(project, shown, outcome.written, left_out), err=err)
        else:
            _echo_report(render.project_report_text(project, shown), err)
            for line in render.left_out_lines(left_out, project.root, outcome.written):
                click.echo(line, err=err)
            click.echo(render.project_summary(project, shown, outcome.written), err=err)
    elif request.report_format == "json":
        click.echo(render.report_json(result, request.source, outcome.written), err=err)
    else:
        _echo_report(render.report_text(result, request.source, cells=outcome.cells), err)
        click.echo(render.summary(result, request.source, outcome.written), err=err)
    if outcome.launch is not None and request.report_format == "text":
        for line in render.next_steps(result, outcome.launch, _gpus()):
            click.echo(line)
    return outcome.exit_code


def _diff(outcome: ConvertOutcome) -> str:
    from distrun.cli import render

    if outcome.project is not None:
        return render.project_diff(outcome.project, outcome.project.shown)
    name = outcome.request.source
    if outcome.cells is not None:
        name += " (code cells)"
    return render.unified_diff(outcome.result.source, outcome.result.output, name)


def _echo_report(text: str, err: bool) -> None:
    from distrun.cli import term

    if text:
        term.echo_report(text, err=err)
