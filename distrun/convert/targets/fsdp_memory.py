"""The memory a sharded model needs, for the `--to fsdp` report: its parameter count read
from the script when the sizes are written there, else the rule.

FSDP2 keeps on each rank 1/WORLD_SIZE of the fp32 weights (4 bytes a parameter), of the
gradients (4 bytes) and of the optimizer's state (SGD 0, with momentum 4, Adam/AdamW 8),
plus, for a moment, the weights of the block being gathered, and the activations.

The count is known when the model is built from the script's own classes or torch's
layers (Linear, Conv, Embedding, LayerNorm, MultiheadAttention, Transformer layers...) with
sizes that are numbers or constants, `ModuleList([Block(...) for _ in range(N)])` too;
anything computed at run time (`len(vocab)`) makes it unknown, and the report says so.
"""

from __future__ import annotations

import math

import libcst as cst

from distrun.convert.analysis import dotted, keyword, positional
from distrun.convert.context import Context
from distrun.convert.idioms import MOVES, method_name
from distrun.convert.models import Model

_FREE = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "ReLU", "GELU", "Tanh",
                   "Sigmoid", "SiLU", "Identity", "Flatten", "MaxPool1d", "MaxPool2d",
                   "AvgPool2d", "AdaptiveAvgPool2d", "Softmax", "LogSoftmax", "LeakyReLU",
                   "ELU", "Mish", "Unflatten"})
_STATE_BYTES = {"Adam": 8, "AdamW": 8, "Adamax": 8, "NAdam": 8, "RAdam": 8, "RMSprop": 4,
                "Adagrad": 4, "Adadelta": 8}
_DEPTH = 6
Env = dict[str, int]


def report(ctx: Context, model: Model, anchor: cst.CSTNode, blocks: tuple[str, ...]) -> None:
    count = parameter_count(ctx, model)
    optimizer, state = _optimizer_state(ctx, model)
    per = 8 + (state if state is not None else 8)
    state_text = f"{optimizer} state {state} B" if state is not None else \
        f"{optimizer} state (8 B for Adam)"
    rule = (f"per rank (weights 4 B + gradients 4 B + {state_text} per parameter) / "
            "WORLD_SIZE, plus one gathered block at a time and the activations")
    if count is None:
        ctx.plan.finding(anchor, "fsdp.memory", "memory: the parameter count cannot be known from "
                         f"the script (sizes computed at run time): {rule}", "print "
                         "sum(p.numel() for p in model.parameters()) before sharding to know "
                         "it", "info")
        return
    total = count * per
    ctx.plan.finding(anchor, "fsdp.memory", f"memory: {count:,} parameters (from the script): "
                     f"{_size(total)} of weights, gradients and optimizer state in all, "
                     f"{_size(total / 2)} a rank on 2 processes, {_size(total / 8)} on 8 "
                     f"({rule})", severity="info")


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} GB"


def _optimizer_state(ctx: Context, model: Model) -> tuple[str, int | None]:
    call = model.optimizer
    name = (ctx.facts.call_name(call) or "") if isinstance(call, cst.Call) else ""
    short = name.rpartition(".")[2] or "the optimizer's"
    if short == "SGD":
        momentum = keyword(call, "momentum") if isinstance(call, cst.Call) else None
        return "SGD", 0 if momentum is None or ctx.facts.code(momentum.value) in ("0", "0.0") \
            else 4
    return short, _STATE_BYTES.get(short)


def parameter_count(ctx: Context, model: Model) -> int | None:
    """The model's parameter count, when its construction can be read statically."""
    built = construction(ctx, model)
    return _Counter(ctx).call(built, _constants(ctx, built), 0) if built is not None else None


def construction(ctx: Context, model: Model) -> cst.Call | None:
    """The one call that builds the model (`Net(...)` of `model = Net(...).to(device)`)."""
    flow = ctx.flow
    values = []
    for target in flow.bindings(model.place):
        value = bound_value(ctx, target)
        while isinstance(value, cst.Call) and method_name(value) in MOVES and \
                isinstance(value.func, cst.Attribute):
            value = value.func.value  # Net().to(device)
        if isinstance(value, cst.Call):
            values.append(value)
    return values[0] if len(values) == 1 else None


def bound_value(ctx: Context, target: cst.CSTNode) -> cst.BaseExpression | None:
    """The value an assignment target is set to (`model = <value>`, `a, b = <value>`)."""
    return next((a.value for a in ctx.facts.ancestors(target) if isinstance(a, cst.Assign)),
                None)


def _constants(ctx: Context, near: cst.CSTNode) -> Env:
    """Integer constants of the module of `near` and of its function, in source order."""
    facts = ctx.facts
    env: Env = {}
    func = facts.function(near)
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or \
                facts.module_of(assign) is not facts.module_of(near):
            continue
        where = facts.function(assign)
        name = dotted(assign.targets[0].target)
        if name is None or "." in name or where is not None and where is not func:
            continue
        value = _number(assign.value, env)
        if value is not None:
            env[name] = value
        else:
            env.pop(name, None)
    return env


def _number(expr: cst.BaseExpression | None, env: Env) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if isinstance(expr, cst.Name):
        if expr.value in ("True", "False"):
            return int(expr.value == "True")
        return env.get(expr.value)
    if isinstance(expr, cst.BinaryOperation):
        left, right = _number(expr.left, env), _number(expr.right, env)
        if left is None or right is None:
            return None
        op = type(expr.operator)
        ops = {cst.Add: left + right, cst.Subtract: left - right, cst.Multiply: left * right}
        if op in ops:
            return ops[op]
        return left // right if op is cst.FloorDivide and right else None
    if isinstance(expr, (cst.Tuple, cst.List)) and expr.elements:
        parts = [_number(e.value, env) for e in expr.elements]
        return math.prod(p for p in parts if p is not None) if None not in parts else None
    return None


class _Counter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def call(self, call: cst.Call, env: Env, depth: int) -> int | None:
        facts = self.ctx.facts
        short = (dotted(call.func) or "").rpartition(".")[2]
        local = facts.local_definition(call)
        if isinstance(local, cst.ClassDef):
            return self._class(local, call, env, depth)
        args = [_number(a.value, env) for a in positional(call)]

        def arg(i: int, name: str, default: int | None = None) -> int | None:
            kw = keyword(call, name)
            if kw is not None:
                return _number(kw.value, env)
            return args[i] if i < len(args) else default

        bias = arg(99, "bias", 1)
        if short in _FREE:
            return 0
        if short == "Linear":
            a, b = arg(0, "in_features"), arg(1, "out_features")
            return a * b + b * bias if None not in (a, b, bias) else None  # type: ignore[operator]
        if short == "Embedding":
            a, b = arg(0, "num_embeddings"), arg(1, "embedding_dim")
            return a * b if a is not None and b is not None else None
        if short in ("LayerNorm", "BatchNorm1d", "BatchNorm2d", "GroupNorm"):
            size = arg(1, "num_channels") if short == "GroupNorm" else arg(0, "")
            return 2 * size if size is not None else None
        if short.startswith("Conv") and short[-2:] in ("1d", "2d", "3d"):
            a, b, k = arg(0, "in_channels"), arg(1, "out_channels"), arg(2, "kernel_size")
            groups, dims = arg(99, "groups", 1), int(short[-2])
            if None in (a, b, k, groups, bias):
                return None
            kernel = k if isinstance(call.args[2].value if len(call.args) > 2 else None,
                                     (cst.Tuple, cst.List)) else k ** dims  # type: ignore[operator]
            return b * (a // groups) * kernel + b * bias  # type: ignore[operator]
        if short == "MultiheadAttention":
            e = arg(0, "embed_dim")
            return 4 * e * e + 4 * e if e is not None else None
        if short in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
            d, ff = arg(0, "d_model"), arg(2, "dim_feedforward", 2048)
            if d is None or ff is None:
                return None
            attention = (4 * d * d + 4 * d) * (2 if "Decoder" in short else 1)
            return attention + 2 * d * ff + ff + d + 2 * d * (3 if "Decoder" in short else 2)
        if short in ("ModuleList", "Sequential", "ModuleDict", "dict"):
            return self._sum([a.value for a in call.args], env, depth)
        if short == "TransformerEncoder" and len(call.args) >= 2:
            layer, count = self.expr(call.args[0].value, env, depth), arg(1, "num_layers")
            return layer * count if layer is not None and count is not None else None
        return None

    def expr(self, expr: cst.BaseExpression, env: Env, depth: int) -> int | None:
        if isinstance(expr, cst.Call):
            return self.call(expr, env, depth)
        if isinstance(expr, (cst.List, cst.Tuple)):
            return self._sum([e.value for e in expr.elements], env, depth)
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp)) and \
                expr.for_in.inner_for_in is None and not expr.for_in.ifs:
            source = expr.for_in.iter
            if isinstance(source, cst.Call) and dotted(source.func) == "range" and \
                    len(source.args) == 1:
                times, each = _number(source.args[0].value, env), self.expr(expr.elt, env, depth)
                return times * each if times is not None and each is not None else None
        if isinstance(expr, cst.Name) and f"<module>{expr.value}" in env:
            return env[f"<module>{expr.value}"]
        return None

    def _sum(self, exprs: list[cst.BaseExpression], env: Env, depth: int) -> int | None:
        counts = [self.expr(e, env, depth) for e in exprs]
        return sum(c for c in counts if c is not None) if None not in counts else None

    def _class(self, cls: cst.ClassDef, call: cst.Call, env: Env, depth: int) -> int | None:
        init = self.ctx.facts.method(cls, "__init__")
        if init is None or depth > _DEPTH or not isinstance(init.body, cst.IndentedBlock):
            return None
        inner: Env = dict(_constants(self.ctx, init))
        params = init.params.params[1:]
        args = positional(call)
        for i, param in enumerate(params):
            given = keyword(call, param.name.value)
            value = given.value if given is not None else (
                args[i].value if i < len(args) else param.default)
            number = _number(value, env if value is not param.default else inner)
            if number is not None:
                inner[param.name.value] = number
            else:
                inner.pop(param.name.value, None)
        total = 0
        for stmt in init.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                return None  # an if, a loop: not read
            for small in stmt.body:
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                target = dotted(small.targets[0].target)
                if target is None:
                    continue
                if not target.startswith("self."):
                    number = _number(small.value, inner)
                    count = None if number is not None else self.expr(small.value, inner,
                                                                      depth + 1)
                    if number is not None:
                        inner[target] = number
                    elif count is not None:
                        inner[f"<module>{target}"] = count
                    continue
                if isinstance(small.value, cst.Call):
                    count = self.expr(small.value, inner, depth + 1)
                    if count is None and not _plain_value(small.value):
                        return None
                    total += count or 0
        return total


def _plain_value(call: cst.Call) -> bool:
    """A call that makes no module: `torch.arange(...)`, `math.sqrt(...)`."""
    name = dotted(call.func) or ""
    return name.startswith(("torch.", "math.", "np.")) and not name.startswith("torch.nn.") \
        and not name.startswith("nn.")
