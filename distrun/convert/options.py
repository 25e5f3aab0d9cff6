"""What the user asked `distrun convert` to do beyond the plain DDP rewrite.

Each option is declared once, in `OPTIONS`: the command line is built from it (by
`distrun.cli.convert`), and so is the parser of the `# distrun-options: ...` line that
fixture tests start with. Adding an option = a field of `ConvertOptions` + one entry.
`read_options` reads the values; the options a chosen target cannot honour are refused
by the target itself (`convert.targets.options_from`, which callers use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
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
    partial: bool = False  # write the result even if a model or training data is left as is
    # the fields the user set on the command line (a user's ds_config.json decides the
    # ZeRO stage and the offload when --zero and --offload-optimizer are not given)
    chosen: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def gave(self, name: str) -> bool:
        """Was the field `name` set by the user: on the command line, or to another value
        than its default?"""
        default = next(f.default for f in fields(self) if f.name == name)
        return name in self.chosen or getattr(self, name) != default


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
    only_for: str | None = None  # the one target (--to) it applies to

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
           (1, 2, 3), only_for="deepspeed"),
    Option("--offload-optimizer", "offload_optimizer", "With --to deepspeed: keep the "
           "optimizer's state and step on the CPU (ZeRO-Offload) [default: none].",
           ("none", "cpu"), None, only_for="deepspeed"),
    Option("--shard", "shard", "With --to fsdp: the module classes sharded one by one (the "
           "model's repeated blocks), comma-separated, or auto: a ModuleList or Sequential "
           "of one class, nn.TransformerEncoderLayer/DecoderLayer [default: auto].",
           metavar="auto|CLASS,...", only_for="fsdp"),
    Option("--grad-accum-no-sync", "grad_accum_no_sync", "Skip the gradient all-reduce on "
           "micro-batches that do not step the optimizer (model.no_sync())."),
    Option("--partial", "partial", "Write the result even when a model is left unwrapped or "
           "training data unsharded (otherwise exit 4, nothing written); the file then starts "
           "with a comment listing what is unresolved."),
)


def read_options(given: dict[str, Any]) -> ConvertOptions:
    """`ConvertOptions` from parsed values keyed by field: a flag's bool, a choice's word
    (None or absent: the default). Raises ValueError for an option given with another
    target than the one it applies to; what else a target refuses, it says itself."""
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
    chosen = frozenset(o.field for o in OPTIONS if given.get(o.field) not in (None, False))
    options = ConvertOptions(**values, chosen=chosen)
    elsewhere: dict[str, list[str]] = {}
    for option in OPTIONS:
        if option.only_for not in (None, options.target) and given.get(option.field) \
                not in (None, False):
            elsewhere.setdefault(str(option.only_for), []).append(option.flag)
    for target, flags in elsewhere.items():
        verb = "apply" if len(flags) > 1 else "applies"
        raise ValueError(f"{' and '.join(flags)} only {verb} to --to {target}")
    return options


def read_words(words: Sequence[str]) -> dict[str, Any]:
    """`["--amp", "fp16", "--sync-bn"]` -> the values keyed by field, as the command line
    reads them (for `read_options`). Raises ValueError on an unknown option or a bad
    choice."""
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
    return given


def given_flags(options: ConvertOptions) -> list[str]:
    """The options set to something else than their default, as the command line
    writes them (`["--to deepspeed", "--amp bf16", "--sync-bn"]`)."""
    default = ConvertOptions()
    flags = []
    for option in OPTIONS:
        value = getattr(options, option.field)
        if value == getattr(default, option.field) or option.field == "partial":
            continue  # --partial says what to write, not what to rewrite
        if option.is_flag:
            flags.append(option.flag)
        elif option.values:
            flags.append(f"{option.flag} {option.choices[option.values.index(value)]}")
        else:
            flags.append(f"{option.flag} {value}")
    return flags
