"""The root `distrun` command.

Subcommands live in their own modules, imported on demand; those modules import
only click at the top and the heavy core (torch, libcst, yaml) inside the command
body, so `distrun --help` and `distrun CMD --help` stay fast. This module
is the one place where a `DistrunError` becomes a message on stderr and an exit code.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NoReturn

import click

from distrun import __version__
from distrun.errors import EXIT_INTERNAL, DistrunError

# name -> (module, attribute)
_COMMANDS: dict[str, tuple[str, str]] = {
    "convert": ("distrun.cli.convert", "convert"),
    "launch": ("distrun.cli.launch", "launch"),
    "config": ("distrun.cli.config", "config"),
    "doctor": ("distrun.cli.doctor", "doctor"),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = _COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command: click.Command = getattr(module, entry[1])
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with the closest command named when the one typed does not exist."""
        name = args[0] if args else ""
        if name in _COMMANDS or name.startswith("-"):
            return super().resolve_command(ctx, args)
        import difflib

        close = difflib.get_close_matches(name, list(_COMMANDS), n=1, cutoff=0.5)
        known = ", ".join(sorted(_COMMANDS))
        hint = f"did you mean 'distrun {close[0]}'?" if close else f"the commands: {known}"
        raise DistrunError(f"no such command {name!r}", hint)


@click.group(cls=LazyGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distrun")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """distrun: make a single-GPU PyTorch script run on many GPUs and machines.

    \b
    Typical use:
      distrun convert train.py            # writes train_ddp.py and a change report
      distrun launch --nproc-per-node 2 train_ddp.py --epochs 3
    \b
    Shell completion (bash; zsh and fish alike, with zsh_source / fish_source):
      eval "$(_DISTRUN_COMPLETE=bash_source distrun)"
    """
    if ctx.invoked_subcommand is None:  # `distrun` alone: the help, not an error
        click.echo(ctx.get_help())


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `distrun` console script and of `python -m distrun`."""
    from distrun.cli import term

    term.json_errors.on, term.json_errors.report_file = False, None  # set by this command's
    try:
        code: Any = cli.main(args=argv, prog_name="distrun", standalone_mode=False)
    except DistrunError as err:
        _fail(err.message, err.hint, err.exit_code)
    except click.exceptions.Abort:
        click.echo("distrun: aborted", err=True)
        sys.exit(130)
    except click.UsageError as err:
        hint = f"see '{err.ctx.command_path} --help'" if err.ctx is not None else None
        _fail(err.format_message(), hint, 2)
    except click.ClickException as err:
        _fail(err.format_message(), None, err.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("distrun: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug in distrun, not a user mistake
        if os.environ.get("DISTRUN_DEBUG"):
            raise
        _fail(f"{type(exc).__name__}: {exc}", None, EXIT_INTERNAL, internal=True)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, hint: str | None, exit_code: int, internal: bool = False) -> NoReturn:
    """Say what went wrong on standard error (and, where the command was asked for JSON,
    as a JSON object on standard output and in its --report-json file); exit."""
    from distrun.cli import term

    head = "internal error" if internal else "error"
    term.echo(f"distrun: {head}: {message}")
    if internal:
        click.echo("  this is a bug in distrun; DISTRUN_DEBUG=1 shows the traceback", err=True)
    elif hint:
        click.echo(f"  hint: {hint}", err=True)
    record = {"error": {"message": message, "hint": hint, "exit_code": exit_code,
                        "internal": internal}}
    if term.json_errors.on:
        import json

        click.echo(json.dumps(record, indent=2))
    if term.json_errors.report_file:
        import json
        from pathlib import Path

        try:
            Path(term.json_errors.report_file).write_text(
                json.dumps({"exit_code": exit_code, "reason": "error", **record}, indent=2)
                + "\n", encoding="utf-8")
        except OSError:
            pass  # the error itself is said above
    sys.exit(exit_code)
