"""`distrun doctor`: check this machine for what breaks distributed runs."""

from __future__ import annotations

import click

from distrun.cli.term import want_json
from distrun.launch_rules import DEFAULT_MASTER_PORT


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, callback=want_json,
              help="Print the checks as a JSON list (an error: a JSON object).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Check against a launch config (distrun.yaml).")
@click.option("--master-addr", help="Node 0's address (default 127.0.0.1).")
@click.option("--master-port", type=click.IntRange(1, 65535), help="Port on node 0 "
              f"(default {DEFAULT_MASTER_PORT}).")
@click.option("--nproc-per-node", help="Processes per node you plan to start.")
@click.option("--nnodes", type=click.IntRange(min=1), help="Nodes you plan to use.")
@click.option("--bandwidth", is_flag=True, help="Also measure all-reduce bandwidth.")
@click.option("--no-smoke", is_flag=True, help="Skip the 2-process smoke test.")
def doctor(as_json: bool, config_file: str | None, master_addr: str | None,
           master_port: int | None, nproc_per_node: str | None, nnodes: int | None,
           bandwidth: bool, no_smoke: bool) -> int:
    """Check this machine: torch, GPUs, backends, network, limits, launchers, apex,
    environment, and a real 2-process collective. Each problem comes with its fix.

    \b
    Exit codes: 0 nothing failed (warnings allowed), 1 a check failed, 2 bad options.
    """
    import json

    from distrun.cli import render, term
    from distrun.doctor import Context, run_checks

    if nproc_per_node is not None:  # the launch rule: doctor refuses what launch refuses
        from distrun.errors import InputError
        from distrun.launch_rules import FLAGS, Verdict, from_text, nproc

        verdict = nproc(from_text(nproc_per_node))
        if isinstance(verdict, Verdict):
            raise InputError(f"{FLAGS(verdict.setting)} {nproc_per_node}: {verdict.message}",
                             verdict.hint)
    ctx = Context(master_addr=master_addr, master_port=master_port,
                  nproc_per_node=nproc_per_node, nnodes=nnodes or 1, smoke=not no_smoke,
                  bandwidth=bandwidth)
    if config_file is not None:
        from distrun.cli.config import load_valid
        from distrun.config.load import node_range

        values = load_valid(config_file).resolved()
        ctx.master_addr = ctx.master_addr or values["master_addr"]
        ctx.master_port = ctx.master_port or values["master_port"]
        ctx.nproc_per_node = ctx.nproc_per_node or str(values["nproc_per_node"])
        ctx.nnodes = nnodes or node_range(values["nnodes"])[1]
    if as_json:
        results = run_checks(ctx)
        click.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:  # each check printed as soon as it is known
        color = term.colour(err=False)
        results = run_checks(ctx, done=lambda r: click.echo(render.doctor_row(r, color),
                                                            color=color))
        click.echo("")
        click.echo(render.doctor_summary(results))
    return 1 if any(r.status == "fail" for r in results) else 0
