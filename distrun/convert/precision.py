"""Reading and changing the mixed precision a script already writes: which dtype each
`torch.autocast` runs in, its GradScalers, a keyword set on a call (shared by the `--amp`
transform and the targets that own the precision).

    torch.autocast("cuda")                      float16 (the CUDA default)
    torch.autocast("cpu") / torch.cpu.amp...    bfloat16 (the CPU default)
    torch.autocast(device.type)                 the device's default: unknown here
    torch.autocast(..., dtype=torch.bfloat16)   bfloat16
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from distrun.convert.analysis import Facts
from distrun.convert.build import append_keyword, expression
from distrun.convert.syntax import keyword, positional, string_value

AUTOCAST = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast",
                      "torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast",
                      "torch.cpu.amp.autocast"})
SCALERS = frozenset({"torch.amp.GradScaler", "torch.cuda.amp.GradScaler",
                     "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"})
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
_NAMES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16"}


def autocasts(facts: Facts) -> list[cst.Call]:
    return [c for c in facts.calls if facts.call_name(c) in AUTOCAST]


def scalers(facts: Facts) -> list[cst.Call]:
    return [c for c in facts.calls if facts.call_name(c) in SCALERS]


def autocast_dtype(facts: Facts, call: cst.Call) -> str | None:
    """"float16" or "bfloat16": the dtype `call` (an autocast) runs in; None when it
    depends on something the script decides at run time (a variable, the device)."""
    name = facts.call_name(call) or ""
    given = keyword(call, "dtype")
    if given is None and len(positional(call)) > 1:  # (device_type, dtype) or (enabled, dtype)
        given = positional(call)[1]
    if given is not None:
        code = facts.code(given.value)
        return _NAMES.get(code.rsplit(".", 1)[-1]) if code.count(".") == 1 else None
    if name.startswith("torch.cuda."):
        return "float16"
    if name.startswith("torch.cpu."):
        return "bfloat16"
    device = keyword(call, "device_type")
    if device is None and positional(call):
        device = positional(call)[0]
    kind = string_value(device.value) if device is not None else None
    return {"cuda": "float16", "cpu": "bfloat16"}.get((kind or "").split(":")[0])


def dtype_setter(facts: Facts, call: cst.Call, dtype: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A rewrite of the (already updated) autocast call `call` that makes it run in
    `torch.<dtype>`: its dtype argument replaced, or `dtype=` added."""
    name = facts.call_name(call) or ""
    # the second positional argument; a torch.cuda.amp form was modernised first, its
    # arguments now after "cuda"
    position = 2 if name.startswith("torch.cuda.") else 1
    return lambda node: set_argument(node, "dtype", f"torch.{dtype}", position)


def set_argument(node: cst.CSTNode, name: str, code: str, position: int | None = None
                 ) -> cst.CSTNode:
    """The call `node` with its argument `name` (a keyword, or the positional one at
    `position`) set to `code`, added as a keyword when it has none."""
    assert isinstance(node, cst.Call)
    value = expression(code)
    args = list(node.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return node.with_changes(args=args)
    plain = [i for i, arg in enumerate(args) if arg.keyword is None and not arg.star]
    if position is not None and len(plain) > position:
        args[plain[position]] = args[plain[position]].with_changes(value=value)
        return node.with_changes(args=args)
    return append_keyword(node, name, value)
