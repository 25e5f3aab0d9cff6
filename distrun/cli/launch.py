"""`distrun launch`: run a script on N processes and N nodes through torchrun, accelerate,
DeepSpeed's launcher or Ray Train."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from distrun.cli.term import want_report_file
from distrun.errors import EXIT_CHECK_FOUND, InputError
from distrun.launch_rules import (
    DEFAULT_MASTER_PORT,
    DEFAULT_RDZV_PORT,
    LAUNCH_ONLY,
    LAUNCHERS,
    MIXED_PRECISION,
    RDZV_BACKENDS,
    SLURM_TASKS,
)

if TYPE_CHECKING:
    from distrun.launch.output import Shown
    from distrun.launch.spec import LaunchRequest, LaunchSpec

NPROC_HELP = ("Processes on this node: a number, or auto (one per visible GPU; 1 on a "
              "CPU-only machine), gpu (one per GPU), cpu (one per CPU core).")


def _pairs(_ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
           ) -> dict[str, str]:
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"{param.opts[-1]} {item!r}: expected KEY=VALUE")
        pairs[key] = value
    return pairs


def _rank_list(_ctx: click.Context, param: click.Parameter, value: str | None
               ) -> frozenset[int] | None:
    """`0`, `0,2`, `1-3`: a set of local ranks."""
    if value is None:
        return None
    ranks: set[int] = set()
    for part in value.split(","):
        low, dash, high = part.strip().partition("-")
        if not (low.isdigit() and (not dash or high.isdigit())):
            raise InputError(f"--ranks {value!r}: expected local ranks such as 0, 0,2 or 1-3")
        ranks.update(range(int(low), int(high if dash else low) + 1))
    return frozenset(ranks)


# distrun options that torchrun spells with underscores (accepted in that spelling too)
TORCHRUN_SPELLINGS = frozenset({
    "--nproc-per-node", "--node-rank", "--master-addr", "--master-port", "--rdzv-backend",
    "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf", "--max-restarts", "--log-dir"})


class LaunchCommand(click.Command):
    """`distrun launch`: notes whether `--` ended distrun's options (then, with a config
    that names the script, everything after it is the script's arguments)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = self._torchrun_spellings(args)
        raw = list(args)
        try:
            rest = super().parse_args(ctx, args)
        except click.NoSuchOption as err:
            config = _config_given(raw)
            if config is None or err.possibilities:
                raise
            after = raw[raw.index(err.option_name):] if err.option_name in raw else []
            raise InputError(
                f"no such option: {err.option_name} (not one of distrun launch's)",
                f"the script's own arguments go after '--': "
                f"distrun launch --config {config} -- {' '.join(after)}") from None
        given = (ctx.params.get("script") is not None) + len(ctx.params.get("script_args") or ())
        ctx.meta["distrun.dashdash"] = given > 0 and len(raw) > given and raw[-given - 1] == "--"
        return rest

    def _torchrun_spellings(self, args: list[str]) -> list[str]:
        """torchrun's spellings of the options it shares with distrun (`--nproc_per_node`,
        `--master_port`...: the notes users copy write them so) as distrun's, among
        distrun's own options only (the script's arguments are left alone). Hidden from
        the help."""
        flags = {opt for param in self.params if isinstance(param, click.Option)
                 and param.is_flag for opt in param.opts}
        out = list(args)
        index = 0
        while index < len(out):
            arg = out[index]
            if arg == "--" or not arg.startswith("-") or arg == "-":
                break
            name, eq, value = arg.partition("=")
            if name.startswith("--") and "_" in name:
                dashed = name.replace("_", "-")
                if dashed in TORCHRUN_SPELLINGS:
                    out[index] = name = dashed if not eq else f"{dashed}={value}"
                    name = dashed
            index += 1 if eq or name in flags or not name.startswith("--") else 2
        return out


HELP = f"""Run SCRIPT [SCRIPT_ARGS...] on many processes and nodes, and supervise it.

\b
Everything after SCRIPT goes to the script ('--' works too). With --config
naming the script, everything after '--' goes to it:
  distrun launch --config distrun.yaml -- --epochs 5
Examples:
  distrun launch --nproc-per-node 2 train_ddp.py --epochs 3
  distrun launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 train_ddp.py
  distrun launch --nnodes 2 --rdzv-endpoint 10.0.0.1:{DEFAULT_RDZV_PORT} train_ddp.py  # every node
  distrun launch --launcher ray --nproc-per-node 2 train_ddp.py  # as Ray Train workers
\b
Every job of more than one process is checked in its first 8 optimizer
steps: what is wrong with the distributed script is named as soon as the
ranks show it (rule ids: see docs/check.md), then the check removes itself;
the job's exit code stays its own. --check checks to the end and makes a
finding exit code 3; --no-check turns the check off:
  distrun launch --check --check-steps 5 --nproc-per-node 2 train_ddp.py
\b
Exit codes: 0 success; 1 a rank failed; 2 bad input (nothing started);
3 --check found a problem; 124 no output for --timeout seconds;
130/143 stopped by Ctrl-C/SIGTERM.
"""


@click.command(cls=LaunchCommand, help=HELP,
               context_settings={"help_option_names": ["-h", "--help"],
                                 "allow_interspersed_args": False})
@click.option("--nproc-per-node", metavar="N|auto|gpu|cpu", help=NPROC_HELP)
@click.option("--nnodes", metavar="N|MIN:MAX", help="Number of nodes (MIN:MAX: elastic, "
              "needs --rdzv-endpoint).")
@click.option("--node-rank", type=int, help="This node's rank, 0..nnodes-1 (static rendezvous).")
@click.option("--master-addr", help="Address of node 0 (multi-node, static rendezvous).")
@click.option("--master-port", type=int, help="Port on node 0. Default: a free port "
              f"(single node), {DEFAULT_MASTER_PORT} (multi-node).")
@click.option("--rdzv-backend", help=f"Rendezvous backend: {' or '.join(RDZV_BACKENDS)} "
              "(default static; an endpoint alone means c10d).")
@click.option("--rdzv-endpoint", metavar="HOST[:PORT]", help="c10d rendezvous: the same "
              f"command on every node (port {DEFAULT_RDZV_PORT} when left out).")
@click.option("--rdzv-id", help="Job id shared by all nodes of a c10d rendezvous.")
@click.option("--rdzv-conf", "rdzv_conf", multiple=True, metavar="KEY=VALUE", callback=_pairs,
              help="c10d rendezvous setting passed to torchrun (repeatable), e.g. "
              "join_timeout=900 or last_call_timeout=5.")
@click.option("--max-restarts", type=int, help="Restarts of the worker group before failing.")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Keep every rank's "
              "stdout/stderr here (default: a temporary folder, removed after a clean run).")
@click.option("--launcher", type=click.Choice((*LAUNCHERS, *LAUNCH_ONLY)),
              help="Launcher to run the job with (default torchrun; ray: the ranks as Ray "
              "Train workers, on a local Ray cluster or the one at --address).")
@click.option("--address", metavar="ADDRESS", help="--launcher ray: the Ray cluster to run "
              "on (auto, HOST:PORT, ray://HOST:PORT; default RAY_ADDRESS, else a local "
              "cluster started and stopped with the job).")
@click.option("--mixed-precision", type=click.Choice(MIXED_PRECISION),
              help="Passed to accelerate; exported as DISTRUN_MIXED_PRECISION either way.")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", callback=_pairs,
              help="Environment variable for the workers (repeatable).")
@click.option("--slurm-tasks", type=click.Choice(SLURM_TASKS), help="Under srun: "
              "one task per node starts the node's processes; one task per GPU (per-gpu) is "
              "one rank, SLURM_PROCID. Default: per-gpu when the step runs more tasks than "
              "nodes.")
@click.option("--timeout", type=float, metavar="SECONDS", help="Stop a job that prints nothing "
              "for this long (hang detector; a rank's silence counts from its first line, or "
              "after 30 s of start-up).")
@click.option("--hang-report-after", "hang_report", type=click.FloatRange(min=0),
              default=300.0, show_default=True, metavar="SECONDS",
              help="Without --timeout: when no rank has printed for this long, say where each "
              "rank is (its stack, its last collective) once, and keep waiting. 0: never.")
@click.option("--ranks", "ranks", metavar="LIST", callback=_rank_list, help="Show the output "
              "of these local ranks only (0, 0,2 or 1-3; like torchrun's --local-ranks-filter); "
              "every rank's is kept with --log-dir.")
@click.option("--rank-prefix", is_flag=True, help="Start each line of the ranks' output with "
              "[rank N].")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="A launch config (distrun.yaml); flags override its values.")
@click.option("-m", "module", is_flag=True, help="SCRIPT is a module name, as in python -m.")
@click.option("--check", is_flag=True, help="Check the job to its end (by default only its "
              "first 8 optimizer steps are) and make any finding exit code 3.")
@click.option("--no-check", is_flag=True, help="Run the workers uninstrumented: no check of "
              "the first steps (the checks of the script's text and output still run).")
@click.option("--check-steps", type=click.IntRange(min=1), metavar="K", help="With --check "
              "(implied): end the job after K optimizer steps.")
@click.option("--report-json", type=click.Path(dir_okay=False), metavar="PATH",
              callback=want_report_file, help="Also write the end report (failures, "
              "findings; or the error, when nothing started) as JSON to PATH.")
@click.option("--dry-run", is_flag=True, help="Print the command and environment; start nothing.")
@click.argument("script", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch(script: str | None, script_args: tuple[str, ...], dry_run: bool, module: bool,
           env: dict[str, str], rdzv_conf: dict[str, str], config_file: str | None,
           check: bool, no_check: bool, check_steps: int | None, report_json: str | None,
           ranks: frozenset[int] | None, rank_prefix: bool, hang_report: float,
           **options: object) -> int:
    """`distrun launch`: the request from the config file and the flags, resolved, run."""
    from distrun.check.session import Session
    from distrun.cli import render, term
    from distrun.launch import backends
    from distrun.launch.resolve import resolve
    from distrun.launch.runner import make_log_dir, run

    request = _request(config_file, options, env, rdzv_conf, script, script_args, module)
    spec = resolve(request)
    _check_deepspeed_config(spec)
    shown = _shown(spec, ranks, rank_prefix)
    if no_check and (check or check_steps is not None):
        raise InputError("--no-check and --check/--check-steps contradict each other",
                         "give one of them")
    session = Session.start(spec, _long_options(), check, check_steps, no_check,
                            _flags(), _typed())
    command = session.instrument(backends.build(spec))
    if not dry_run:
        make_log_dir(spec)  # a bad --log-dir is said before anything else
    for note in (*spec.notes, *session.notes):
        click.echo(f"distrun: {note}", err=True)
    for finding in session.findings:
        term.echo(render.finding(finding, warning=True))
    if dry_run:
        click.echo(render.dry_run(command))
        session.close()
        return 0
    try:
        result = run(command, spec, shown=shown,
                     watch=lambda: [term.heads(render.finding(f)) for f in session.poll()],
                     where=session.where_ranks_wait if session.instrumented else None,
                     quiet=hang_report or None)
        found = session.finish(result.printed, result.exit_code == 0)
    finally:
        session.close()
    report = "\n".join(line for line in (
        render.launch_report(result, spec),
        render.check_report(session, found, result.exit_code == 0)) if line)
    if report:
        term.echo(report)
    if session.kept_dumps is not None:
        click.echo(f"distrun: the ranks' Flight Recorder dumps are kept in "
                   f"{session.kept_dumps} (for NCCL's, `torchfrtrace {session.kept_dumps} "
                   "--prefix trace_rank_` matches them across ranks)", err=True)
    code = result.exit_code
    if code == 0 and session.check and session.findings:
        code = EXIT_CHECK_FOUND
    if result.reason == "ok":
        click.echo(render.done_line(result, spec, code), err=True, color=term.colour())
    if report_json is not None:
        _write_json(report_json, render.launch_record(result, session, code))
    return code


def _request(config_file: str | None, options: dict[str, Any], env: dict[str, str],
             rdzv_conf: dict[str, str], script: str | None, script_args: tuple[str, ...],
             module: bool) -> LaunchRequest:
    """The LaunchRequest: the config file's values (each noted with its FILE:LINE), the
    flags over them."""
    from distrun.launch.spec import LaunchRequest

    request = LaunchRequest()
    if config_file is not None:
        from distrun.cli.config import load_valid
        from distrun.config.exports import request_from

        cfg = load_valid(config_file)
        request = request_from(cfg)
        request.origin = {key: f"{config_file}:{line}" for key, line in cfg.lines.items()}
    for name, value in options.items():
        if value is not None:
            setattr(request, name, value)
            request.origin.pop(name, None)
    request.env = {**request.env, **env}
    request.rdzv_conf = {**request.rdzv_conf, **rdzv_conf}
    after_dashdash = click.get_current_context().meta.get("distrun.dashdash", False)
    if script is not None and after_dashdash and config_file is not None and request.script:
        request.script_args = (script, *script_args)  # `-- ARGS`: the config's script's
    elif script is not None:
        if config_file is not None and request.script and not module and not _exists(script):
            raise InputError(
                f"{script}: no such file", f"{config_file} names the script "
                f"({request.script}): give its arguments after '--': distrun launch --config "
                f"{config_file} -- {' '.join((script, *script_args))}")
        request.script, request.script_args, request.module = script, script_args, module
    return request


def _exists(path: str) -> bool:
    from pathlib import Path

    try:
        return Path(path).exists()
    except OSError:
        return False


def _config_given(raw: list[str]) -> str | None:
    """The --config file among distrun's own options (before a `--`), if any."""
    for number, arg in enumerate(raw):
        if arg == "--":
            return None
        if arg == "--config" and number + 1 < len(raw):
            return raw[number + 1]
        if arg.startswith("--config="):
            return arg.removeprefix("--config=")
    return None


def _shown(spec: LaunchSpec, ranks: frozenset[int] | None, prefix: bool) -> Shown:
    """Whose output is shown, and tagged how (a global rank where this node's first is
    known: a static rendezvous with a number of processes)."""
    from distrun.launch.output import Shown

    if not isinstance(spec.nproc_per_node, int):  # a word only in exports; resolve counts it
        return Shown(ranks=ranks, prefix=prefix, offset=None)
    nproc = spec.ranks_here
    if spec.task is not None:  # one SLURM task: its rank is one of its node's
        nproc = spec.task.local_world_size
    missing = sorted(r for r in ranks or () if r >= nproc)
    if missing:
        raise InputError(f"--ranks: local rank {missing[0]} does not exist here",
                         f"this node runs local ranks 0..{nproc - 1}")
    offset = spec.node_rank * nproc if spec.rdzv_backend == "static" else None
    if spec.task is not None:
        offset = spec.task.rank - spec.task.local_rank
    return Shown(ranks=ranks, prefix=prefix, offset=offset)


def _write_json(path: str, record: dict[str, object]) -> None:
    import json
    from pathlib import Path

    try:
        Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    except OSError as err:
        click.echo(f"distrun: warning: --report-json {path}: cannot write it: "
                   f"{err.strerror}", err=True)


def _check_deepspeed_config(spec: LaunchSpec) -> None:
    """The DeepSpeed config the job would hand to DeepSpeed, checked before anything
    starts (launch/ds_config.py; exit 2 naming FILE:LINE)."""
    from distrun.config import deepspeed
    from distrun.launch import ds_config

    nproc = spec.nproc_per_node
    world = nproc * spec.max_nodes if isinstance(nproc, int) and not spec.elastic else None
    if spec.task is not None:
        world = spec.task.world_size
    ds_config.check(spec.script, tuple(spec.script_args), dict(spec.env), spec.launcher,
                    spec.module, world, deepspeed.load)


def _flags() -> frozenset[str]:
    """distrun launch's options that take no value."""
    return frozenset(name for param in launch.params if isinstance(param, click.Option)
                     and param.is_flag for name in param.opts)


def _typed() -> list[str] | None:
    """The words the user typed after `distrun` (`launch ...`), when this process is the
    distrun command."""
    import sys

    argv = sys.argv[1:]
    return argv if argv[:1] == ["launch"] else None


def _long_options() -> list[str]:
    """distrun launch's own option names (--nproc-per-node...)."""
    return [name for param in launch.params for name in param.opts if name.startswith("--")]
