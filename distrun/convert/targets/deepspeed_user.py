"""The DeepSpeed config the user already has (`--to deepspeed`): found, read, and made
the base of the one distrun writes (`deepspeed_merge`), and the one the converted
script reads.

Where it is looked for, the first found wins:
  1. the default of the script's own argparse option naming a DeepSpeed config
     (`--deepspeed_config`, `--deepspeed-config`, `--ds_config`, `--ds-config`, or
     `--deepspeed` taking a value), a path beside the script;
  2. ds_config.json beside the script;
  3. the one *.json beside the script whose every key is a DeepSpeed key (several:
     refused, the script's option names the one to use).
The merged config is written, relative to the output's folder, under the name the
script's option gives by default; else the name of the user's file when the script has
such an option (it is passed at run time: `python train.py --deepspeed my_ds.json`);
else ds_config.json. The converted script reads what its option names ($DS_CONFIG set
from it after `parse_args()`), else $DS_CONFIG, else the written file beside itself.

The options not given on the command line come from the user's config: `--zero` from
`zero_optimization.stage`, and under `--amp keep` the precision from its `fp16`, `bf16` or
`torch_autocast` section (the script's own autocast and GradScaler then go, as with
`--amp fp16|bf16`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import libcst as cst

from distrun.config import jsonc
from distrun.config.deepspeed import DEEPSPEED_KEYS, KNOWN_KEYS, walk
from distrun.config.records import MAX_BYTES
from distrun.convert.analysis import keyword, positional
from distrun.convert.build import statements
from distrun.convert.context import Context
from distrun.convert.idioms import method_name, receiver
from distrun.convert.options import Amp
from distrun.convert.syntax import dotted, string_value

FILENAME = "ds_config.json"
FLAGS = ("--deepspeed_config", "--deepspeed-config", "--ds_config", "--ds-config",
         "--deepspeed")
_NO_VALUE = ("store_true", "store_false", "store_const", "count")


@dataclass(frozen=True)
class Option:
    """The script's argparse option that names its DeepSpeed config."""

    call: cst.Call  # its add_argument(...)
    flag: str
    dest: str
    default: str | None  # a path written in the script, or None
    computed: bool = False  # its default is an expression, known at run time only


@dataclass
class UserConfig:
    name: str  # the file written, relative to the output's folder
    option: Option | None = None
    source: Path | None = None  # the user's file, when one was read
    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # "zero_optimization.stage" -> 7
    comments: int = 0
    label: str = ""  # the user's file as the report names it (relative to the script)
    precision: Amp | None = None  # "fp16" / "bf16": the precision its sections set
    took_precision: bool = False  # --amp keep: its precision sections decide

    @property
    def shown(self) -> str:
        return self.label or self.name


def find(ctx: Context) -> UserConfig | None:
    """The user's config (an empty one when there is none); None when the conversion
    was refused (a file that is no JSON object, several candidates)."""
    option = _option(ctx)
    folder = Path(ctx.folder) if ctx.folder is not None else None
    if option is not None and option.default is not None:
        path = Path(option.default) if folder is None else folder / option.default
        if folder is not None and path.is_file():
            return _read(ctx, path, option.default, option, option.default)
        return UserConfig(option.default, option)
    if folder is None:
        return UserConfig(FILENAME, option)
    if (folder / FILENAME).is_file():
        return _read(ctx, folder / FILENAME, FILENAME, option, FILENAME)
    found = [p for p in sorted(folder.glob("*.json")) if _only_deepspeed(p)]
    if len(found) > 1:
        ctx.refuse(option.call if option else None, "deepspeed.config_ambiguous",
                   f"{len(found)} DeepSpeed configs beside the script "
                   f"({', '.join(p.name for p in found)}) and none named: which one the "
                   "script runs with cannot be told", "name it as the default of the "
                   "script's `--deepspeed_config` option, or call it ds_config.json")
        return None
    if found:
        return _read(ctx, found[0], found[0].name if option else FILENAME, option,
                     found[0].name)
    return UserConfig(FILENAME, option)


def _read(ctx: Context, path: Path, name: str, option: Option | None, label: str
          ) -> UserConfig | None:
    at = option.call if option is not None else None
    try:
        data = path.read_bytes()[:MAX_BYTES + 1]
        parsed = jsonc.parse(data.decode("utf-8")) if len(data) <= MAX_BYTES else None
    except (OSError, UnicodeDecodeError, jsonc.JsonError) as err:
        where = f" (line {err.line})" if isinstance(err, jsonc.JsonError) else ""
        ctx.refuse(at, "deepspeed.config_unreadable", f"{path.name}{where}: the user's "
                   f"DeepSpeed config cannot be read ({err}), so it cannot be the base of "
                   "the one written", f"fix {path.name}, or move it away")
        return None
    if parsed is None or parsed.root.kind != "object":
        ctx.refuse(at, "deepspeed.config_unreadable", f"{path.name}: the user's DeepSpeed "
                   "config is not a JSON object (or is over 1 MiB)", f"fix {path.name}, "
                   "or move it away")
        return None
    values = jsonc.plain(parsed.root)
    user = UserConfig(name, option, path.resolve(), values,
                      {key: m.line for key, m in walk(parsed.root, "")},
                      len(parsed.comments), label)
    user.precision = _precision(values)
    return user


def _only_deepspeed(path: Path) -> bool:
    """A JSON object all of whose keys are DeepSpeed's, one at least of them its own."""
    try:
        data = path.read_bytes()
        if len(data) > MAX_BYTES:
            return False
        root = jsonc.parse(data.decode("utf-8")).root
    except (OSError, UnicodeDecodeError, jsonc.JsonError):
        return False
    keys = {m.key for m in root.value} if root.kind == "object" else set()
    return bool(keys & DEEPSPEED_KEYS) and keys <= KNOWN_KEYS


def enabled(values: dict[str, Any], section: str) -> bool:
    found = values.get(section)
    return isinstance(found, dict) and found.get("enabled") is True


def _precision(values: dict[str, Any]) -> Amp | None:
    if enabled(values, "fp16"):
        return "fp16"
    if any(enabled(values, s) for s in ("bf16", "bfloat16", "torch_autocast")):
        return "bf16"
    return None


def _option(ctx: Context) -> Option | None:
    for call in ctx.facts.calls:
        if method_name(call) != "add_argument":
            continue
        flags = [string_value(a.value) or "" for a in positional(call)]
        flag = next((f for f in flags if f in FLAGS), None)
        action = keyword(call, "action")
        if flag is None or action is not None and string_value(action.value) in _NO_VALUE:
            continue
        dest = keyword(call, "dest")
        long = next((f for f in flags if f.startswith("--")), flag)
        name = (string_value(dest.value) if dest is not None else None) or \
            long.lstrip("-").replace("-", "_")
        default = keyword(call, "default")
        path = string_value(default.value) if default is not None else None
        computed = default is not None and path is None and not (
            isinstance(default.value, cst.Name) and default.value.value == "None")
        return Option(call, flag, name, path or None, computed)
    return None


def settle(ctx: Context, user: UserConfig) -> None:
    """The options the command line left to the user's config: the ZeRO stage, the
    precision (under --amp keep)."""
    options, values = ctx.options, user.values
    zero = values.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, dict) else None
    taken = []
    if not options.gave("zero") and isinstance(stage, int) and not isinstance(stage, bool) \
            and 0 <= stage <= 3:
        options = replace(options, zero=stage)
        taken.append(f"ZeRO stage {stage} (--zero not given)")
    if options.amp == "keep" and user.precision is not None:
        options = replace(options, amp=user.precision)
        user.took_precision = True
        taken.append(f"{user.precision} (--amp keep: the precision is the config's, "
                     "autocast and GradScaler in the script go)")
    ctx.options = options
    if options.zero == 3 and options.eval_shard:
        ctx.refuse(user.option.call if user.option else None, "deepspeed.config_zero3_eval",
                   f"{user.shown} sets ZeRO stage 3 and --eval shard was given: under "
                   "ZeRO-3 each forward pass gathers the weights from every rank, so "
                   "every rank must evaluate the same batches", "use --eval full, or "
                   "--zero 2")
    if user.source is not None:
        ctx.plan.finding(user.option.call if user.option else None, "deepspeed.config_base",
                         f"{user.shown} (the user's DeepSpeed config) is the base of the "
                         f"{user.name} written: its values are kept, each key distrun adds "
                         "or changes is reported" + (f"; from it: {', '.join(taken)}"
                                                      if taken else ""), severity="info")


def read_from_option(ctx: Context, user: UserConfig) -> None:
    """After the script parses its arguments, $DS_CONFIG is what its option names: the
    config deepspeed.initialize reads is the one given to the script."""
    option = user.option
    if option is None:
        return
    parser = receiver(option.call)
    parses = [c for c in ctx.facts.calls if method_name(c) in ("parse_args", "parse_known_args")
              and receiver(c) == parser]
    for call in parses:
        assign = ctx.facts.parent.get(call)
        stmt = ctx.facts.statement(call)
        target: cst.BaseExpression | None = assign.targets[0].target \
            if isinstance(assign, cst.Assign) and len(assign.targets) == 1 else None
        if isinstance(target, cst.Tuple) and target.elements:
            target = target.elements[0].value  # args, rest = parser.parse_known_args()
        args = dotted(target) if target is not None else None
        if args is None or not isinstance(stmt, cst.SimpleStatementLine):
            continue
        n = ctx.names
        ctx.need("os", at=stmt)
        ctx.plan.insert_after(stmt, statements(
            f"if {args}.{option.dest}:  # distrun: deepspeed.initialize reads the config "
            f"{option.flag} names\n    {n.os}.environ[\"DS_CONFIG\"] = {args}.{option.dest}\n"))
        if option.computed:
            ctx.plan.finding(option.call, "deepspeed.config_named", f"the default of "
                             f"`{option.flag}` is computed at run time: distrun cannot merge "
                             "into the config it names, which the converted script reads as "
                             f"it is (distrun's settings are in {user.name})", "write the "
                             "default as a path, then convert again; or pass "
                             f"`{option.flag} {user.name}`")
        ctx.plan.change(option.call, "deepspeed.config_named",
                        f"`{option.flag}` names the DeepSpeed config: deepspeed.initialize "
                        f"reads the one it names at run time" + (
                            f" (by default {option.default}" if option.default else
                            f" (without it: {user.name} beside the script") +
                        f", where distrun wrote {'the merged' if user.source else 'its'} "
                        "config)")
        return
    ctx.plan.finding(option.call, "deepspeed.config_named",
                     f"`{option.flag}` names a DeepSpeed config, but no `args = "
                     f"{parser}.parse_args()` was found: the converted script reads "
                     f"$DS_CONFIG, else {user.name} beside it", "set DS_CONFIG to the "
                     "config the option names, or parse the arguments as "
                     "`args = parser.parse_args()`")
