"""ds_config.json for `convert --to deepspeed`: concrete values read from the script.

DeepSpeed takes from its config what a plain script writes in code: the per-process
batch, the gradient clipping, the precision. The converter writes each value it can
read from the script (a literal, a constant, an environment or argparse default) and
says where it came from; never `"auto"` (only the Hugging Face Trainer fills those in).

    train_micro_batch_size_per_gpu   the training DataLoader's batch_size
    gradient_accumulation_steps      the `% N` of the condition the script steps under, else 1
    managed_gradient_accumulation    false when the script steps under a condition
    gradient_clipping                clip_grad_norm_'s max_norm, else 0.0 (DeepSpeed
                                     0.19.8 clips at 1.0 when the key is missing)
    zero_optimization                --zero, --offload-optimizer
    zero_allow_untested_optimizer    true unless the optimizer is Adam or AdamW
    fp16 (auto_cast)                 --amp fp16: DeepSpeed's fp16 with loss scaling (CUDA only)
    torch_autocast (bfloat16)        --amp bf16: fp32 weights, the forward pass autocast
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import Facts, keyword, positional
from distrun.convert.syntax import string_value

FILENAME = "ds_config.json"
# The optimizers DeepSpeed's ZeRO runs without `zero_allow_untested_optimizer`.
ZERO_TESTED = frozenset({"torch.optim.Adam", "torch.optim.AdamW", "torch.optim.adam.Adam",
                         "torch.optim.adamw.AdamW"})


@dataclass(frozen=True)
class Value:
    """A number read from the script, and where it came from (for the report)."""

    number: float
    how: str  # "the literal 64", "the default of --batch-size"...


def constant(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> Value | None:
    """The number `expr` has when the script runs with no options and no environment:
    a literal, a name assigned one literal, `int(os.environ.get("X", 64))`, or
    `args.x` with argparse's `default=`. None when it cannot be told."""
    if depth > 4:
        return None
    if isinstance(expr, (cst.Integer, cst.Float)):
        return Value(float(expr.evaluated_value), f"the literal {facts.code(expr)}")
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = constant(facts, expr.expression, depth + 1)
        return Value(-inner.number, inner.how) if inner else None
    if isinstance(expr, cst.Name):
        values = _assigned(facts, expr.value)
        if len(values) == 1:
            found = constant(facts, values[0], depth + 1)
            return Value(found.number, f"`{expr.value}` = {found.how}") if found else None
        return None
    if isinstance(expr, cst.Call):
        name = facts.call_name(expr) or ""
        args = positional(expr)
        if name in ("int", "float") and len(args) == 1:
            return constant(facts, args[0].value, depth + 1)
        if name in ("os.environ.get", "os.getenv") and len(args) == 2:
            default = args[1].value
            text = string_value(default)
            number = _number(text) if text is not None else None
            if number is not None:
                return Value(number, f"the default of ${string_value(args[0].value)}")
            found = constant(facts, default, depth + 1)
            return Value(found.number, f"the default of ${string_value(args[0].value)}") \
                if found else None
    if isinstance(expr, cst.Attribute):
        return _argparse_default(facts, expr.attr.value, depth)
    if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _ARITHMETIC:
        left, right = (constant(facts, e, depth + 1) for e in (expr.left, expr.right))
        if left is None or right is None or (right.number == 0 and not isinstance(
                expr.operator, (cst.Add, cst.Subtract, cst.Multiply))):
            return None
        number = _ARITHMETIC[type(expr.operator)](left.number, right.number)
        return Value(number, f"`{facts.code(expr)}`: {left.how}, {right.how}")
    return None


_ARITHMETIC: dict[type, Callable[[float, float], float]] = {
    cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul,
    cst.Divide: operator.truediv, cst.FloorDivide: operator.floordiv}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _assigned(facts: Facts, name: str) -> list[cst.BaseExpression]:
    """The values `name` is assigned anywhere (`name = value`)."""
    values = []
    for node in facts.names:
        parent = facts.parent.get(node)
        if node.value == name and isinstance(parent, cst.AssignTarget):
            assign = facts.parent.get(parent)
            if isinstance(assign, cst.Assign):
                values.append(assign.value)
    return values


def _argparse_default(facts: Facts, dest: str, depth: int) -> Value | None:
    for call in facts.calls:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "add_argument"):
            continue
        flags = [string_value(a.value) or "" for a in positional(call)]
        explicit = keyword(call, "dest")
        names = {string_value(explicit.value)} if explicit is not None else {
            f.lstrip("-").replace("-", "_") for f in flags}
        default = keyword(call, "default")
        if dest in names and default is not None:
            found = constant(facts, default.value, depth + 1)
            if found is not None:
                return Value(found.number, f"the default of {flags[0]}")
    return None


def micro_batch(facts: Facts, loader: cst.Call | None) -> Value | None:
    """The batch size of the training DataLoader `loader` (1, DataLoader's default,
    when it names none); None when a batch_sampler of its own decides the batch."""
    if loader is None or keyword(loader, "batch_sampler") is not None:
        return None
    arg = keyword(loader, "batch_size")
    pos = positional(loader)
    if arg is None and len(pos) > 1:
        arg = pos[1]
    if arg is None:
        return None if any(a.star == "**" for a in loader.args) else Value(1, "DataLoader's "
                                                                            "default")
    return constant(facts, arg.value)


def text(data: dict[str, object]) -> str:
    return json.dumps(data, indent=2) + "\n"
