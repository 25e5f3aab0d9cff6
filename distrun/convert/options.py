"""What the user asked `distrun convert` to do beyond the plain DDP rewrite.

Each option is declared once, in `OPTIONS`: the command line is built from it (by
`distrun.cli.convert`), and so is the parser of the `# distrun-options: ...` line that
fixture tests start with. Adding an option = a field of `ConvertOptions` + one entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Amp = Literal["keep", "fp16", "bf16", "none"]
Target = Literal["ddp", "accelerate", "deepspeed", "fsdp"]


@dataclass(frozen=True)
class ConvertOptions:
    target: Target = "ddp"  # plain torch DDP, Hugging Face accelerate, or DeepSpeed
    amp: Amp = "keep"  # keep: leave mixed precision as it is (deprecated forms modernised)
    sync_bn: bool = False  # BatchNorm -> SyncBatchNorm on GPU
    scale_lr: bool = False  # learning rate x WORLD_SIZE (linear scaling rule)
    grad_accum_no_sync: bool = False  # no all-reduce on micro-steps that do not step
    eval_shard: bool = False  # shard evaluation loaders, all-reduce the loop's sums
    zero: int = 2  # deepspeed: the ZeRO stage
    offload_optimizer: str = "none"  # deepspeed: "cpu" keeps the optimizer's state in RAM
    shard: str = "auto"  # fsdp: the block classes sharded one by one ("auto": found)


@dataclass(frozen=True)
class Option:
    """One command-line option of `distrun convert` that sets a `ConvertOptions` field."""

    flag: str  # "--amp"
    field: str  # the ConvertOptions field it sets
    help: str
    choices: tuple[str, ...] = ()  # a choice of words; none: an on/off flag
    default: str | None = None  # the word chosen when the option is not given (None:
    # the field's own default, and the option counts as not given)
    values: tuple[Any, ...] = ()  # the field's value for each choice (default: the word)
    metavar: str | None = None  # a free value (`--shard Block,Layer`), not a choice

    @property
    def is_flag(self) -> bool:
        return not self.choices and self.metavar is None

    def value(self, word: str) -> Any:
        """The field's value for the choice `word`."""
        return self.values[self.choices.index(word)] if self.values else word


OPTIONS: tuple[Option, ...] = (
    Option("--to", "target", "Plain torch DistributedDataParallel, Hugging Face accelerate, "
           "DeepSpeed (ZeRO; writes ds_config.json beside the output), or FSDP2 (fully_shard: "
           "weights, gradients and optimizer state sharded).",
           ("ddp", "accelerate", "deepspeed", "fsdp"), "ddp"),
    Option("--amp", "amp", "Mixed precision: keep the script's (deprecated torch.cuda.amp "
           "forms modernised), add fp16 / bf16 autocast, or remove it.",
           ("keep", "fp16", "bf16", "none"), "keep"),
    Option("--sync-bn", "sync_bn", "BatchNorm -> SyncBatchNorm (on GPU)."),
    Option("--scale-lr", "scale_lr", "Multiply learning rates by WORLD_SIZE (linear scaling "
           "rule)."),
    Option("--eval", "eval_shard", "Evaluation: every rank evaluates the full set, or each a "
           "shard with the sums all-reduced (both exact).", ("full", "shard"), "full",
           (False, True)),
    Option("--zero", "zero", "With --to deepspeed: the ZeRO stage (1: optimizer state "
           "sharded, 2: gradients too, 3: weights too) [default: 2].", ("1", "2", "3"), None,
           (1, 2, 3)),
    Option("--offload-optimizer", "offload_optimizer", "With --to deepspeed: keep the "
           "optimizer's state and step on the CPU (ZeRO-Offload) [default: none].",
           ("none", "cpu"), None),
    Option("--shard", "shard", "With --to fsdp: the module classes sharded one by one (the "
           "model's repeated blocks), comma-separated, or auto: a ModuleList or Sequential "
           "of one class, nn.TransformerEncoderLayer/DecoderLayer [default: auto].",
           metavar="auto|CLASS,..."),
    Option("--grad-accum-no-sync", "grad_accum_no_sync", "Skip the gradient all-reduce on "
           "micro-batches that do not step the optimizer (model.no_sync())."),
)


def options_from(given: dict[str, Any]) -> ConvertOptions:
    """`ConvertOptions` from parsed values keyed by field: a flag's bool, a choice's word
    (None or absent: the default)."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw = given.get(option.field)
        if option.is_flag:
            values[option.field] = bool(raw)
        elif option.metavar is not None:
            if raw is not None:
                values[option.field] = str(raw)
        else:
            word = raw if raw is not None else option.default
            if word is not None:
                values[option.field] = option.value(word)
    options = ConvertOptions(**values)
    deepspeed_only = [o.flag for o in OPTIONS if o.field in ("zero", "offload_optimizer")
                      and given.get(o.field) is not None]
    if deepspeed_only and options.target != "deepspeed":
        raise ValueError(f"{' and '.join(deepspeed_only)} only apply to --to deepspeed")
    if options.target == "deepspeed" and options.zero == 3 and options.eval_shard:
        raise ValueError("--eval shard does not apply to --zero 3: each forward pass of the "
                         "model gathers its weights from every rank, so every rank must "
                         "evaluate the same batches (use --eval full, or --zero 2)")
    if options.target == "deepspeed" and options.grad_accum_no_sync:
        raise ValueError("--grad-accum-no-sync does not apply to --to deepspeed: DeepSpeed "
                         "already reduces the gradients only when the optimizer steps")
    _check_fsdp(options, given)
    return options


def _check_fsdp(options: ConvertOptions, given: dict[str, Any]) -> None:
    """What does not go with --to fsdp, and --shard without it."""
    if options.target != "fsdp":
        if given.get("shard") is not None:
            raise ValueError("--shard only applies to --to fsdp")
        return
    shard = options.shard.replace(" ", "")
    if shard != "auto" and not all(name.isidentifier() for name in shard.split(",")):
        raise ValueError(f"--shard takes auto or class names separated by commas, not "
                         f"{options.shard!r}")
    if options.amp == "fp16":
        raise ValueError("--amp fp16 does not apply to --to fsdp: use --amp bf16 (FSDP2's "
                         "MixedPrecisionPolicy, no loss scaling needed), keep or none")
    if options.grad_accum_no_sync:
        raise ValueError("--grad-accum-no-sync does not apply to --to fsdp (FSDP2 skips "
                         "the reduction with model.set_requires_gradient_sync(False))")
    if options.eval_shard:
        raise ValueError("--eval shard does not apply to --to fsdp: every forward pass of "
                         "a sharded model gathers weights from every rank, so each rank "
                         "evaluates the full set")


def parse_words(words: Sequence[str]) -> ConvertOptions:
    """`["--amp", "fp16", "--sync-bn"]` -> ConvertOptions, as the command line reads them.
    Raises ValueError on an unknown option or a bad choice."""
    by_flag = {option.flag: option for option in OPTIONS}
    given: dict[str, Any] = {}
    items = iter(words)
    for word in items:
        option = by_flag.get(word)
        if option is None:
            raise ValueError(f"unknown convert option {word!r}")
        if option.is_flag:
            given[option.field] = True
            continue
        choice = next(items, None)
        if option.metavar is not None and choice is not None:
            given[option.field] = choice
            continue
        if choice not in option.choices:
            raise ValueError(f"{word} takes one of {', '.join(option.choices)}, not {choice!r}")
        given[option.field] = choice
    return options_from(given)
