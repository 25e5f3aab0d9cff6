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
from typing import Any

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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distrun")
def cli() -> None:
    """distrun: make a single-GPU PyTorch script run on many GPUs and machines.

    \b
    Typical use:
      distrun convert train.py            # writes train_ddp.py and a change report
      distrun launch --nproc-per-node 2 train_ddp.py --epochs 3
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `distrun` console script and of `python -m distrun`."""
    try:
        code: Any = cli.main(args=argv, prog_name="distrun", standalone_mode=False)
    except DistrunError as err:
        click.echo(f"distrun: error: {err.message}", err=True)
        if err.hint:
            click.echo(f"  hint: {err.hint}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo("distrun: aborted", err=True)
        sys.exit(130)
    except click.UsageError as err:
        click.echo(f"distrun: error: {err.format_message()}", err=True)
        if err.ctx is not None:
            click.echo(f"  hint: see '{err.ctx.command_path} --help'", err=True)
        sys.exit(2)
    except click.ClickException as err:
        click.echo(f"distrun: error: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("distrun: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug in distrun, not a user mistake
        if os.environ.get("DISTRUN_DEBUG"):
            raise
        click.echo(f"distrun: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("  this is a bug in distrun; DISTRUN_DEBUG=1 shows the traceback",
                   err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)
