"""`distrun convert`: parse options, call the converter, write files, render the report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from distrun.cli.term import want_json
from distrun.convert.options import OPTIONS
from distrun.errors import EXIT_FOUND_WORK, EXIT_NOT_CONVERTED, EXIT_OK, InputError

if TYPE_CHECKING:
    from distrun.convert.report import ConvertResult

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
              help="Write the result to OUT ('-': stdout). Default: <stem>_ddp.py beside "
              "SCRIPT; for a project, the folder <folder>_ddp beside its folder.")
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
    themselves, each kept as FILE.orig).

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
    from pathlib import Path

    from distrun.cli import render, term
    from distrun.convert import convert_source
    from distrun.convert.project import find_modules
    from distrun.files import default_output, read_script, same_file, write_atomic

    modes = [m for m, on in (("-o", output is not None), ("--in-place", in_place),
                             ("--diff", show_diff), ("--check", check)) if on]
    if len(modes) > 1:
        raise InputError(f"{' and '.join(modes)} cannot be used together",
                         "choose one of -o OUT, --in-place, --diff, --check")
    if no_backup and not in_place:
        raise InputError("--no-backup only makes sense with --in-place")

    from distrun.convert.targets import options_from

    try:
        options = options_from(chosen)
    except ValueError as err:
        raise InputError(str(err), "add the --to it applies to, or leave the option "
                         "out") from None
    _exists(script)
    if script.endswith(".ipynb"):
        from distrun.cli.convert_notebook import convert_notebook_command

        return convert_notebook_command(script, output, in_place, show_diff, check, force,
                                        report_format, options)
    if output not in (None, "-") and same_file(output, script):
        raise InputError(f"{output} is the script itself: refusing to overwrite it",
                         "use --in-place to rewrite it (a .orig backup is kept)")
    source = read_script(script)
    if source.is_empty:
        raise InputError(f"{script}: empty file (no Python code in it): nothing to convert",
                         "check that this is the script you meant: it holds no code")
    top = Path(root) if root is not None else None
    if len(find_modules(Path(script), top)) > 1:
        from distrun.cli.convert_project import convert_project_command

        return convert_project_command(script, output, in_place, no_backup, show_diff, check,
                                       force, report_format, options, root)
    result = convert_source(source.text, script, options)
    written: str | None = None
    target_file: str | None = None
    report_to_stderr = output == "-" or show_diff

    if check or show_diff:
        pass
    elif output == "-":
        click.echo(result.output, nl=False)  # unchanged scripts too: `-o - > x.py` works
    elif result.status == "unsupported":
        pass  # the reason is in the report; a copy of the script would only mislead
    elif result.changed or output is not None:  # an explicit OUT always holds the result
        target_file = script if in_place else (output or default_output(script, options.target))
        beside = write_beside(result.files, target_file, force or in_place, check_only=True)
        write_atomic(target_file, source.encode(result.output), like=script,
                     backup=(in_place and not no_backup) or force, force=force or in_place)
        write_beside(result.files, target_file, force or in_place)
        written = target_file + "".join(f" (and {name})" for name in beside)

    if show_diff:
        term.echo_diff(render.unified_diff(result.source, result.output, script))
    code = show_report(result, script, written, report_format, report_to_stderr, check)
    if target_file is not None and report_format == "text" and result.status == "converted":
        for line in render.next_steps(result, target_file, options.target, _gpus()):
            click.echo(line)
    return code


def _exists(script: str) -> None:
    """A SCRIPT that does not exist: the closest name beside it, if one is close."""
    from pathlib import Path

    from distrun.launch.validate import closest_file

    path = Path(script)
    if path.exists():
        return
    close = closest_file(path)
    raise InputError(f"{script}: no such file", f"did you mean {close}?" if close
                     else "check the path")


def _gpus() -> int:
    """GPUs here, from nvidia-smi (no torch import)."""
    from distrun.config.init import gpu_count

    return gpu_count()


def write_beside(files: Mapping[str, str], output: str, force: bool,
                 check_only: bool = False) -> list[str]:
    """Write the files a conversion makes besides the script (ds_config.json) into the
    output's folder; an existing different one is replaced only with `force`, and kept as
    FILE.orig. `check_only`: raise if one may not be written, write nothing. The paths."""
    from pathlib import Path

    from distrun.files import needs_writing, write_atomic

    paths = []
    for name, text in files.items():
        path = str(Path(output).parent / name)
        data = text.encode()
        if check_only:
            needs_writing(path, data, force)
        else:
            write_atomic(path, data, backup=force and Path(path).exists(), force=force)
        paths.append(path)
    return paths


def show_report(result: ConvertResult, script: str, written: str | None, report_format: str,
                to_stderr: bool, check: bool,
                cells: Mapping[int, tuple[int, int]] | None = None) -> int:
    """Print the report (text or JSON, on stderr when stdout holds a script or a diff);
    the exit code: 1 under --check when there is work to do."""
    from distrun.cli import render, term

    if report_format == "json":
        click.echo(render.report_json(result, script, written), err=to_stderr)
    else:
        text = render.report_text(result, script, cells=cells)
        if text:
            term.echo_report(text, err=to_stderr)
        click.echo(render.summary(result, script, written), err=to_stderr)
    if result.status == "unsupported":
        return EXIT_NOT_CONVERTED
    return EXIT_FOUND_WORK if check and result.changed else EXIT_OK
