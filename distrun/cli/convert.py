"""`distrun convert`: parse options, call the converter, write files, render the report."""

from __future__ import annotations

import click

from distrun.errors import EXIT_FOUND_WORK, EXIT_OK, InputError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("script", type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", "output", metavar="OUT",
              help="Write the result to OUT ('-': stdout). Default: <stem>_ddp.py beside SCRIPT.")
@click.option("--in-place", is_flag=True,
              help="Rewrite SCRIPT itself; the original is kept as SCRIPT.orig.")
@click.option("--no-backup", is_flag=True, help="With --in-place: keep no SCRIPT.orig.")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if SCRIPT needs converting, 0 if not.")
@click.option("--force", is_flag=True, help="Replace an existing OUT (kept as OUT.orig).")
@click.option("--to", "target", type=click.Choice(["ddp", "accelerate"]), default="ddp",
              show_default=True, help="Plain torch DistributedDataParallel, or Hugging Face "
              "accelerate.")
@click.option("--amp", type=click.Choice(["keep", "fp16", "bf16", "none"]), default="keep",
              show_default=True, help="Mixed precision: keep the script's (deprecated "
              "torch.cuda.amp forms modernised), add fp16 / bf16 autocast, or remove it.")
@click.option("--sync-bn", is_flag=True, help="BatchNorm -> SyncBatchNorm (on GPU).")
@click.option("--scale-lr", is_flag=True, help="Multiply learning rates by WORLD_SIZE "
              "(linear scaling rule).")
@click.option("--eval", "eval_mode", type=click.Choice(["full", "shard"]), default="full",
              show_default=True, help="Evaluation: every rank evaluates the full set, or "
              "each a shard with the sums all-reduced (both exact).")
@click.option("--grad-accum-no-sync", is_flag=True, help="Skip the gradient all-reduce on "
              "micro-batches that do not step the optimizer (model.no_sync()).")
@click.option("--report", "report_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Format of the change report.")
def convert(script: str, output: str | None, in_place: bool, no_backup: bool, show_diff: bool,
            check: bool, force: bool, target: str, amp: str, sync_bn: bool, scale_lr: bool,
            eval_mode: str, grad_accum_no_sync: bool, report_format: str) -> int:
    """Rewrite a single-GPU PyTorch SCRIPT into a DistributedDataParallel script.

    \b
    Every change and every warning is reported as FILE:LINE. Exit codes:
      0  converted (or already distributed: nothing to do)
      1  --check: the script needs converting
      2  bad input: missing, empty or binary file, not Python 3, syntax error,
         OUT would overwrite SCRIPT, OUT cannot be written
    \b
    Examples:
      distrun convert train.py                 # writes train_ddp.py
      distrun convert train.py --diff          # show what would change
      distrun convert train.py --in-place      # train.py rewritten, train.py.orig kept
      distrun convert train.py --check         # for CI / pre-commit
    """
    from distrun.cli import render
    from distrun.convert import ConvertOptions, convert_source
    from distrun.files import default_output, read_script, same_file, write_atomic

    modes = [m for m, on in (("-o", output is not None), ("--in-place", in_place),
                             ("--diff", show_diff), ("--check", check)) if on]
    if len(modes) > 1:
        raise InputError(f"{' and '.join(modes)} cannot be used together",
                         "choose one of -o OUT, --in-place, --diff, --check")
    if no_backup and not in_place:
        raise InputError("--no-backup only makes sense with --in-place")

    if output not in (None, "-") and same_file(output, script):
        raise InputError(f"{output} is the script itself: refusing to overwrite it",
                         "use --in-place to rewrite it (a .orig backup is kept)")
    source = read_script(script)
    if source.is_empty:
        raise InputError(f"{script}: empty file (no Python code in it): nothing to convert",
                         "check that this is the script you meant: it holds no code")
    options = ConvertOptions(target=target, amp=amp, sync_bn=sync_bn,  # type: ignore[arg-type]
                             scale_lr=scale_lr, grad_accum_no_sync=grad_accum_no_sync,
                             eval_shard=eval_mode == "shard")
    result = convert_source(source.text, script, options)
    written: str | None = None
    report_to_stderr = output == "-" or show_diff

    if check or show_diff:
        pass
    elif output == "-":
        click.echo(result.output, nl=False)  # unchanged scripts too: `-o - > x.py` works
    elif result.changed:
        target_file = script if in_place else (output or default_output(script, target))
        write_atomic(target_file, source.encode(result.output), like=script,
                     backup=(in_place and not no_backup) or force, force=force or in_place)
        written = target_file

    if show_diff:
        click.echo(render.unified_diff(result.source, result.output, script), nl=False)
    if report_format == "json":
        click.echo(render.report_json(result, script, written), err=report_to_stderr)
    else:
        text = render.report_text(result, script)
        if text:
            click.echo(text, err=report_to_stderr)
        click.echo(render.summary(result, script, written), err=report_to_stderr)
    if check and result.changed:
        return EXIT_FOUND_WORK
    return EXIT_OK
