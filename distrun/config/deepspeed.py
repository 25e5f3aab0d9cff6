"""Checking a user's DeepSpeed config (ds_config.json) before a job meets it.

Configs copied from Hugging Face examples are full of `"auto"`, which only the HF Trainer
fills in. Outside it, DeepSpeed (0.19) does one of two things: in the sections it reads
through its pydantic models (fp16, bf16, zero_optimization) it drops the value and uses
its default, silently (`"fp16": {"enabled": "auto"}` trains in fp32); elsewhere (batch
sizes, gradient clipping, optimizer and scheduler parameters) the string reaches code
that needs a number and fails. Each `"auto"` is named with its line, what the Trainer
would have put there, and what to write instead.

Also checked: duplicate keys (DeepSpeed refuses the file), the batch-size arithmetic
(train_batch_size = micro batch x accumulation x world size), fp16 and bf16 both on,
gradient clipping left to DeepSpeed's default (1.0 since 0.19.8: training changes without
a word), an optimizer ZeRO has not tested, ZeRO-Offload's needs, and key names close to
a known one. Facts from deepspeed 0.19.8's runtime/config.py, zero/ and engine.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from distrun.config import deepspeed_types, jsonc
from distrun.config.jsonc import Member, Node, Parsed, plain
from distrun.config.records import Config, Problem, read

# top-level keys whose section DeepSpeed reads through a pydantic model that drops "auto"
_DROPS_AUTO = {"fp16": "its default, false", "bf16": "its default, false",
               "bfloat16": "its default, false", "zero_optimization": "its default"}
# "auto" key -> (how the HF Trainer fills it in, what to do instead)
_AUTO = {
    "fp16.enabled": ("from --fp16", "write true or false"),
    "bf16.enabled": ("from --bf16", "write true or false"),
    "optimizer.params.lr": ("from --learning_rate", "write the script's learning rate"),
    "optimizer.params.betas": ("from --adam_beta1 and --adam_beta2",
                               "write the script's betas, e.g. [0.9, 0.999]"),
    "optimizer.params.eps": ("from --adam_epsilon", "write the script's eps, e.g. 1e-8"),
    "optimizer.params.weight_decay": ("from --weight_decay",
                                      "write the script's weight decay (0 if none)"),
    "scheduler.params.warmup_min_lr": ("with 0", "write the learning rate the warm-up "
                                       "starts from, e.g. 0"),
    "scheduler.params.warmup_max_lr": ("from --learning_rate",
                                       "write the script's learning rate"),
    "scheduler.params.warmup_num_steps": ("from --warmup_steps",
                                          "write the number of warm-up steps"),
    "scheduler.params.total_num_steps": ("with the run's number of steps",
                                         "write the number of optimizer steps of the run"),
    "gradient_accumulation_steps": ("from --gradient_accumulation_steps", "write the "
                                    "script's accumulation steps (1 if it has none)"),
    "gradient_clipping": ("from --max_grad_norm",
                          "write the script's max_norm, or 0.0 for no clipping"),
    "train_batch_size": ("with world size x micro batch x accumulation", "remove the key: "
                         "DeepSpeed computes it from the micro batch, the accumulation "
                         "steps and the world size"),
    "train_micro_batch_size_per_gpu": ("from --per_device_train_batch_size",
                                       "write the script's batch size per process"),
    "zero_optimization.reduce_bucket_size": ("with the model's hidden size squared",
                                             "write a number of elements, e.g. 5e8"),
    "zero_optimization.stage3_prefetch_bucket_size": (
        "with 0.9 x the hidden size squared", "write a number of elements, e.g. 5e7"),
    "zero_optimization.stage3_param_persistence_threshold": (
        "with 10 x the model's hidden size", "write a number of elements, e.g. 1e5"),
}
# "auto" key -> what accelerate (accelerate 1.15, `accelerator.prepare` with a DeepSpeed
# plugin: Accelerator._prepare_deepspeed, DeepSpeedPlugin.set_mixed_precision) puts there;
# a key not named here stops prepare() with ValueError ("... not found in kwargs")
_HIDDEN = ("from model.config.hidden_size (a plain torch module has no config: prepare() "
           "fails)")
_ACCELERATE = {
    "fp16.enabled": "from its --mixed_precision",
    "bf16.enabled": "from its --mixed_precision",
    "train_micro_batch_size_per_gpu": "from the batch size of the DataLoader given to prepare()",
    "train_batch_size": "from that batch size x accumulation x processes",
    "gradient_accumulation_steps": "from its own gradient_accumulation_steps",
    "gradient_clipping": "with 1.0 (or its own gradient_clipping setting)",
    "zero_optimization.reduce_bucket_size": _HIDDEN,
    "zero_optimization.stage3_prefetch_bucket_size": _HIDDEN,
    "zero_optimization.stage3_param_persistence_threshold": _HIDDEN,
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "with false",
    "optimizer.params.lr": "only for its DummyOptim (else prepare() fails)",
    "optimizer.params.weight_decay": "only for its DummyOptim (else prepare() fails)",
    **{f"scheduler.params.{key}": "only for its DummyScheduler (else prepare() fails)"
       for key in ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")},
}
# DeepSpeed's optimizers (config "type", any case); others under ZeRO are "untested"
_TESTED = {"adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion", "muon"}
_KNOWN = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "steps_per_print", "wall_clock_breakdown", "dump_state", "optimizer", "scheduler", "fp16",
    "bf16", "bfloat16", "amp", "gradient_clipping", "prescale_gradients",
    "gradient_predivide_factor", "sparse_gradients", "zero_optimization",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "activation_checkpointing",
    "flops_profiler", "comms_logger", "tensorboard", "wandb", "csv_monitor",
    "communication_data_type", "data_types", "elasticity", "autotuning", "checkpoint", "aio",
    "memory_breakdown", "disable_allgather", "compression_training", "data_efficiency",
    "curriculum_learning", "pipeline", "sparse_attention", "seq_parallel_communication_data_type",
    "gradient_accumulation_dtype", "compile", "tensor_parallel", "nebula", "hybrid_engine",
    "weight_quantization", "zero_optimization_stage", "monitor_config", "torch_autocast",
    "managed_gradient_accumulation",
}
KNOWN_KEYS = frozenset(_KNOWN)  # the top-level keys DeepSpeed 0.19.8 reads
DEEPSPEED_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu",
                  "gradient_accumulation_steps", "zero_optimization", "fp16", "bf16",
                  "optimizer", "scheduler", "gradient_clipping", "steps_per_print"}


def load(path: str, world_size: int | None = None, auto_filled_by: str | None = None
         ) -> Config:
    """`path` read as a DeepSpeed config and checked (`Config.values`: its plain values;
    `Config.lines`: the line of each key, "zero_optimization.stage" -> 7).
    `auto_filled_by`: what fills in its "auto" values for this job (the script uses the
    Hugging Face Trainer): each one is then a warning, not an error."""
    text = read(path)
    if not isinstance(text, str):
        return Config(path, problems=[text])
    try:
        parsed = jsonc.parse(text)
    except jsonc.JsonError as err:
        return Config(path, problems=[Problem(err.line, "", (
            f"not JSON (column {err.column}): {err.message}"))])
    if not looks_like_deepspeed(parsed):
        return Config(path, problems=[Problem(parsed.root.line, "", (
            "not a DeepSpeed config: none of " + ", ".join(sorted(DEEPSPEED_KEYS)) +
            " is set (distrun's own launch config is YAML: distrun.yaml)"))])
    return Config(path, values=plain(parsed.root),
                  problems=check(parsed, world_size, auto_filled_by),
                  lines={key: member.line for key, member in walk(parsed.root, "")})


def looks_like_deepspeed(parsed: Parsed) -> bool:
    """A JSON object with at least one key only DeepSpeed configs have."""
    root = parsed.root
    return root.kind == "object" and any(m.key in DEEPSPEED_KEYS for m in root.value)


def check(parsed: Parsed, world_size: int | None = None, auto_filled_by: str | None = None
          ) -> list[Problem]:
    problems: list[Problem] = []
    root = parsed.root
    if root.kind != "object":
        return [Problem(root.line, "", "a DeepSpeed config is a JSON object ({...})")]
    if parsed.comments:
        problems.append(Problem(parsed.comments[0], "", (
            f"{len(parsed.comments)} comment(s): DeepSpeed reads its config with hjson, which "
            "accepts them, but `json.load` and most JSON tools refuse the file"), "warning"))
    if parsed.trailing_commas:
        problems.append(Problem(parsed.trailing_commas[0], "", (
            "trailing comma(s): accepted by DeepSpeed's hjson reader, refused by JSON tools"),
            "warning"))
    problems += _duplicates(root)
    problems += _autos(root, auto_filled_by)
    problems += _keys(root)
    problems += deepspeed_types.check(root)
    top = {m.key: m for m in root.value}
    values = plain(root)
    problems += _batch(top, values, world_size)
    problems += _precision(top, values)
    problems += _clipping(top, values)
    problems += _optimizer(top, values)
    return sorted(problems, key=lambda p: (p.line, p.key))


def walk(node: Node, prefix: str) -> Iterator[tuple[str, Member]]:
    if node.kind == "object":
        for member in node.value:
            path = f"{prefix}{member.key}"
            yield path, member
            yield from walk(member.node, f"{path}.")
    elif node.kind == "array":
        for index, item in enumerate(node.value):
            yield from walk(item, f"{prefix}{index}.")


def _duplicates(root: Node) -> list[Problem]:
    objects = [("", root), *((f"{path}.", member.node) for path, member in walk(root, "")
                             if member.node.kind == "object")]
    found = []
    for prefix, node in objects:
        seen: dict[str, int] = {}
        for child in node.value:
            if child.key in seen:
                found.append(Problem(child.line, f"{prefix}{child.key}", (
                    f"`{child.key}` is given twice (also line {seen[child.key]}): DeepSpeed "
                    "refuses a config with a duplicate key")))
            seen.setdefault(child.key, child.line)
    return found


def _autos(root: Node, filled_by: str | None = None) -> list[Problem]:
    found = []
    values = plain(root)
    for path, member in walk(root, ""):
        if member.node.kind != "string" or member.node.value.lower() != "auto":
            continue
        source, fix = _AUTO.get(path, ("", "write a concrete value"))
        filled = ("the Hugging Face Trainer fills it in" + (f" ({source})" if source else ""))
        section = path.split(".")[0]
        if section in _DROPS_AUTO:
            happens = f"DeepSpeed alone drops it and uses {_DROPS_AUTO[section]}, silently"
        elif path == "optimizer.params.lr" and "scheduler" in values:
            happens = ("DeepSpeed alone hands the string to the optimizer: torch's optimizers "
                       "(`torch_adam`) refuse it, DeepSpeed's FusedAdam runs only because the "
                       "scheduler sets the learning rate before the first step")
        else:
            happens = "DeepSpeed alone passes the string on where a number is needed, and fails"
        accelerate = ("accelerate's prepare() fills it in " + _ACCELERATE[path]
                      if path in _ACCELERATE else "accelerate's prepare() does not fill it "
                      "in (ValueError)")
        if filled_by:
            found.append(Problem(member.line, path, (
                f"{path} is \"auto\": {filled_by} fills it in{f' ({source})' if source else ''}"
                f"; outside it {happens.replace('DeepSpeed alone ', 'DeepSpeed ')}"),
                "warning"))
            continue
        found.append(Problem(member.line, path, (
            f"{path} is \"auto\": {filled}; {accelerate}; {happens}. Fix: {fix}")))
    return found


def _keys(root: Node) -> list[Problem]:
    found = []
    for member in root.value:
        if member.key in _KNOWN:
            continue
        close = difflib.get_close_matches(member.key, sorted(_KNOWN), n=1, cutoff=0.8)
        if close:
            found.append(Problem(member.line, member.key, (
                f"unknown key `{member.key}` (did you mean `{close[0]}`?): DeepSpeed ignores "
                "keys it does not know"), "warning"))
    return found


def _number(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if float(value).is_integer() else None


def _line(top: dict[str, Member], key: str) -> int:
    return top[key].line if key in top else 1


def _batch(top: dict[str, Member], values: dict[str, object], world: int | None
           ) -> list[Problem]:
    total, micro, steps = (_number(values.get(k)) for k in (
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    given = [k for k in ("train_batch_size", "train_micro_batch_size_per_gpu")
             if k in values]
    if not given:
        return [Problem(1, "train_micro_batch_size_per_gpu", (
            "neither train_batch_size nor train_micro_batch_size_per_gpu is set: DeepSpeed "
            "needs one of them (the batch size per process, times the accumulation steps and "
            "the world size, makes the first)"))]
    if total is None or micro is None:
        return []
    line = _line(top, "train_batch_size")
    per_step = micro * (steps if steps is not None else 1)
    if world is not None and total != per_step * world:
        return [Problem(line, "train_batch_size", (
            f"train_batch_size {total} is not micro batch {micro} x accumulation "
            f"{steps if steps is not None else 1} x world size {world} = {per_step * world}: "
            "DeepSpeed stops at initialize (\"Check batch related parameters\")"))]
    if world is None and (per_step == 0 or total % per_step):
        return [Problem(line, "train_batch_size", (
            f"train_batch_size {total} is not a multiple of micro batch {micro} x accumulation "
            f"{steps if steps is not None else 1} = {per_step}: no world size satisfies "
            "DeepSpeed's check (train_batch_size = micro x accumulation x world size)"))]
    return []


def _enabled(values: dict[str, object], key: str) -> bool:
    section = values.get(key)
    return isinstance(section, dict) and section.get("enabled") is True


def _precision(top: dict[str, Member], values: dict[str, object]) -> list[Problem]:
    bf16 = "bf16" if "bf16" in values else "bfloat16"
    if _enabled(values, "fp16") and _enabled(values, bf16):
        return [Problem(_line(top, bf16), bf16, (
            "fp16 and bf16 are both enabled: DeepSpeed refuses it (\"cannot be simultaneously "
            "enabled\"); keep one"))]
    return []


def _clipping(top: dict[str, Member], values: dict[str, object]) -> list[Problem]:
    if "gradient_clipping" in values:
        return []
    return [Problem(1, "gradient_clipping", (
        "gradient_clipping is not set: DeepSpeed 0.19.8 clips gradients at 1.0 by default "
        "(earlier versions did not clip), so the training changes without a word; set it: "
        "the script's max_norm, or 0.0 for no clipping"), "warning")]


def _optimizer(top: dict[str, Member], values: dict[str, object]) -> list[Problem]:
    found = []
    zero = values.get("zero_optimization")
    zero = zero if isinstance(zero, dict) else {}
    stage = _number(zero.get("stage")) or 0
    optimizer = values.get("optimizer")
    kind = optimizer.get("type") if isinstance(optimizer, dict) else None
    if (stage > 0 and isinstance(kind, str) and kind.lower() not in _TESTED
            and not values.get("zero_allow_untested_optimizer")):  # DeepSpeed: truthiness
        found.append(Problem(_line(top, "optimizer"), "optimizer.type", (
            f"optimizer {kind} under ZeRO stage {stage}: DeepSpeed stops at initialize "
            "(\"You are using an untested ZeRO Optimizer\") unless the config sets "
            "\"zero_allow_untested_optimizer\": true")))
    offload = zero.get("offload_optimizer")
    device = offload.get("device") if isinstance(offload, dict) else None
    if device in ("cpu", "nvme"):
        member = next(m for m in top["zero_optimization"].node.value
                      if m.key == "offload_optimizer")
        runs = (f"the config's {kind} runs on the CPU as DeepSpeedCPUAdam, whose op DeepSpeed "
                "compiles on the first run (a C++ compiler and minutes; `ds_report` shows "
                "whether it is built)" if isinstance(kind, str) and kind.lower() in
                ("adam", "adamw") else "the optimizer steps on the CPU")
        client = ("" if values.get("zero_force_ds_cpu_optimizer") is False else
                  "; a script that passes its own torch optimizer to deepspeed.initialize is "
                  "refused (ZeRORuntimeException) unless the config sets "
                  "\"zero_force_ds_cpu_optimizer\": false")
        found.append(Problem(member.line, "zero_optimization.offload_optimizer", (
            f"ZeRO-Offload to {device} (stage {stage}): {runs}{client}"), "warning"))
    return found
