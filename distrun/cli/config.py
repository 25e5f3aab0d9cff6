"""`distrun config`: write, check, show and export launch configs (distrun.yaml).

None of these commands imports torch: they work on a login node without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from distrun.cli.term import want_json
from distrun.errors import InputError
from distrun.launch_rules import LAUNCHERS, MIXED_PRECISION

if TYPE_CHECKING:
    from distrun.config.load import Config

DEFAULT = "distrun.yaml"
file_argument = click.argument("file", default=DEFAULT, required=False,
                               type=click.Path(dir_okay=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def config() -> None:
    """Write, check, show and export the launch config (distrun.yaml).

    \b
      distrun config init                       # a few questions, writes distrun.yaml
      distrun config validate                   # every problem, with its line
      distrun config export --format slurm -o job.sbatch
      distrun config export --format deepspeed -o run/   # ds_config.json + commands
      distrun launch --config distrun.yaml      # flags override the file
    """


@config.command()
@click.option("-o", "--output", default=DEFAULT, show_default=True, help="File to write.")
@click.option("--force", is_flag=True, help="Replace an existing file.")
@click.option("--non-interactive", is_flag=True, help="Ask nothing: flags and defaults only.")
@click.option("--script", help="Training script.")
@click.option("--launcher", type=click.Choice(LAUNCHERS))
@click.option("--nnodes", help="Number of nodes (N or MIN:MAX).")
@click.option("--nproc-per-node", help="Processes per node (N, auto, gpu, cpu).")
@click.option("--master-addr", help="Address of node 0 (multi-node).")
@click.option("--master-port", type=int, help="Port on node 0.")
@click.option("--mixed-precision", type=click.Choice(MIXED_PRECISION))
def init(output: str, force: bool, non_interactive: bool, **given: str | int | None) -> int:
    """Write a launch config, asking only what it cannot detect.

    \b
    With no terminal to ask on (input from a pipe that ends, or /dev/null), it stops
    with exit code 2: pass --non-interactive to use the flags and the defaults.
    """
    import shlex
    from pathlib import Path

    from distrun.config.init import answers_to_yaml, ask, detected_defaults, missing
    from distrun.files import write_atomic

    if Path(output).exists() and not force:
        raise InputError(f"{output} already exists", "pass --force to replace it (the old one "
                         f"is kept as {output}.orig), or choose another -o")
    values = detected_defaults()
    values.update({k: v for k, v in given.items() if v is not None})
    if not non_interactive:
        try:
            values = ask(values, given)
        except click.exceptions.Abort as abort:
            if not isinstance(abort.__context__, EOFError):
                raise  # Ctrl-C
            click.echo()  # end the unanswered prompt's line
            raise InputError("config init asks questions, but its input ended before the "
                             "answers (no terminal?); nothing written",
                             "run it in a terminal, or pass --non-interactive (the flags "
                             "given and the defaults, no question)") from None
    problem = missing(values)
    if problem is not None:
        raise InputError(*problem)
    text = answers_to_yaml(values)
    from distrun.config.load import parse

    problems = [p for p in parse(text, output).problems if p.severity == "error"]
    if problems:
        raise InputError(f"these answers do not make a valid config: {problems[0].message}")
    write_atomic(output, text.encode(), backup=force, force=force)
    quoted = shlex.quote(output)
    click.echo(f"wrote {output}")
    click.echo(f"check it:  distrun config validate {quoted}")
    nnodes = str(values.get("nnodes") or 1)
    if nnodes in ("1", "1:1"):
        click.echo(f"run it:    distrun launch --config {quoted}")
    else:
        click.echo(f"run it:    distrun launch --config {quoted} --node-rank R   # on node R "
                   f"of {nnodes}, node 0 first")
    return 0


@config.command()
@file_argument
@click.option("--json", "as_json", is_flag=True, callback=want_json,
              help="Print the problems as JSON.")
@click.option("--world-size", type=click.IntRange(min=1), metavar="N",
              help="DeepSpeed config: check its batch sizes against N processes in all.")
def validate(file: str, as_json: bool, world_size: int | None) -> int:
    """Check FILE (default distrun.yaml): exit 0 if valid, 1 listing every problem.

    \b
    A FILE ending in .json or .hjson is read as a DeepSpeed config (ds_config.json):
    every "auto" (only the Hugging Face Trainer fills them in), the batch-size
    arithmetic, gradient clipping, ZeRO's optimizer and offload needs.
      distrun config validate ds_config.json --world-size 8
    """
    import json

    if file.endswith((".json", ".hjson")):
        from distrun.config import deepspeed

        cfg = deepspeed.load(file, world_size)
    else:
        from distrun.config.load import load

        if world_size is not None:
            raise InputError("--world-size applies to a DeepSpeed config (a .json file)")
        cfg = load(file)
    if as_json:
        click.echo(json.dumps({"file": file, "valid": cfg.valid, "problems": [
            {"line": p.line, "key": p.key, "severity": p.severity, "message": p.message}
            for p in cfg.problems]}, indent=2))
    else:
        for p in cfg.problems:
            click.echo(f"{file}:{p.line}: {p.severity}: {p.message}")
        errors = sum(p.severity == "error" for p in cfg.problems)
        click.echo(f"{file}: valid" if cfg.valid else f"{file}: {errors} problem(s)")
    return 0 if cfg.valid else 1


@config.command()
@file_argument
@click.option("--json", "as_json", is_flag=True, callback=want_json,
              help="JSON instead of YAML.")
def show(file: str, as_json: bool) -> int:
    """Print FILE's config with every default filled in."""
    import json

    import yaml

    cfg = load_valid(file)
    data = cfg.resolved()
    click.echo(json.dumps(data, indent=2) if as_json else yaml.safe_dump(data, sort_keys=False))
    return 0


@config.command()
def schema() -> int:
    """Print the JSON Schema of distrun.yaml (for editors)."""
    import json

    from distrun.config.schema import json_schema

    click.echo(json.dumps(json_schema(), indent=2))
    return 0


@config.command()
@file_argument
@click.option("--format", "fmt", required=True,
              type=click.Choice(["torchrun", "accelerate", "slurm", "kubernetes", "trainjob",
                                 "deepspeed"]),
              help="What to render.")
@click.option("-o", "--output", help="Write to OUT instead of stdout (deepspeed: a .json "
              "file, or a folder for OUT/ds_config.json).")
@click.option("--force", is_flag=True, help="Replace an existing OUT (kept as OUT.orig).")
def export(file: str, fmt: str, output: str | None, force: bool) -> int:
    """Render FILE for torchrun, accelerate, SLURM (sbatch), Kubernetes (a Kubeflow
    Trainer v2 TrainJob, or a Training Operator v1 PyTorchJob) or DeepSpeed.

    \b
    --format trainjob: a TrainJob (trainer.kubeflow.org/v1alpha1) on the
    ClusterTrainingRuntime torch-distributed (kubernetes.runtime); what it has no
    field for is named in the manifest and on stderr. --format kubernetes: a
    PyTorchJob (kubeflow.org/v1), for the Training Operator v1.
      distrun config export --format trainjob -o job.yaml && kubectl apply -f job.yaml

    \b
    --format deepspeed: the job's DeepSpeed config (JSON): the file the job reads
    (deepspeed.config, else ds_config.json beside the script) with the deepspeed:
    keys written in, or one built from them (deepspeed.micro_batch needed), and the
    commands that run it: DeepSpeed's `deepspeed` and `distrun launch --launcher
    deepspeed`. Without -o the JSON goes to stdout and the commands to stderr; with
    -o the JSON (and a multi-node job's hostfile beside it) is written there and
    the commands go to stdout.
      distrun config export --format deepspeed -o run/       # run/ds_config.json
      distrun config export --format deepspeed -o job.json   # the commands use it
    """
    from pathlib import Path

    from distrun.cli import term
    from distrun.config.exports import export as render_export
    from distrun.config.exports import export_deepspeed, not_carried, notes
    from distrun.files import needs_writing, write_atomic

    cfg = load_valid(file)
    for lost in not_carried(cfg, fmt):
        term.echo(f"distrun: warning: --format {fmt}: not carried: {lost}")
    for note in notes(fmt):
        term.echo(f"distrun: note: {note}")
    to_stdout = output in (None, "-")
    commands = ""
    if fmt == "deepspeed":
        rendered = export_deepspeed(cfg, None if to_stdout else output)
        text, commands, files = rendered.json, rendered.commands, rendered.files
    else:
        text = render_export(cfg, fmt)
        files = {str(output): text}
    if to_stdout:
        click.echo(text, nl=False)
        click.echo(commands, nl=False, err=True)
        return 0
    for path, content in files.items():  # refuse before writing anything
        needs_writing(path, content.encode(), force)
    for path, content in files.items():
        if str(output).endswith("/"):  # -o run/: a folder to make
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, content.encode(), backup=force, force=force)
        click.echo(f"wrote {path}", err=True)
    click.echo(commands, nl=False)
    return 0


def load_valid(file: str) -> Config:
    """The config in `file`, or exit 2 listing its errors."""
    from distrun.config.load import load

    cfg = load(file)
    errors = [p for p in cfg.problems if p.severity == "error"]
    if errors:
        listing = "\n".join(f"  {file}:{p.line}: {p.message}" for p in errors)
        raise InputError(f"{file} is not a valid config:\n{listing}",
                         f"see `distrun config validate {file}`")
    return cfg
