"""`distrun launch`: run a script on N local processes through torchrun."""

from __future__ import annotations

import click

from distrun.errors import InputError


@click.command(context_settings={"help_option_names": ["-h", "--help"],
                                 "ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes to start on this machine (one per GPU; on CPU, gloo processes).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=None,
              help="Rendezvous port. Default: a free port.")
@click.option("--dry-run", is_flag=True, help="Print the command and start nothing.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch(nproc_per_node: int, master_port: int | None, dry_run: bool, script: str,
           script_args: tuple[str, ...]) -> int:
    """Run SCRIPT [SCRIPT_ARGS...] on --nproc-per-node processes through torchrun.

    \b
    Everything after SCRIPT goes to the script. Example:
      distrun launch --nproc-per-node 2 train_ddp.py --epochs 3
    """
    import os
    import shlex

    from distrun.launch.backends import torchrun
    from distrun.launch.runner import free_port, run
    from distrun.launch.spec import LaunchSpec

    if not os.path.isfile(script):
        raise InputError(f"{script}: no such file", "check the path of the script to launch")
    spec = LaunchSpec(script=script, script_args=script_args, nproc_per_node=nproc_per_node,
                      master_port=master_port or free_port())
    command = torchrun.build(spec)
    if dry_run:
        click.echo(shlex.join(command.argv))
        return 0
    return run(command)
