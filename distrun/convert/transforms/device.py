"""Devices: every GPU the script names becomes the local rank's device.

Rewrites:
  x.cuda() / x.cuda(0) / x.cuda(non_blocking=True)  ->  x.to(DEVICE[, non_blocking=True])
  "cuda" / "cuda:0" as a device (torch.device(...), .to(...), device=..., map_location=...,
  or assigned to a name with "device" in it)          ->  DEVICE
  torch.device("cuda", 0)                              ->  DEVICE
  device = 0 / gpu = 0  (a GPU index)                  ->  device = DEVICE
                                         (LOCAL_RANK where it is formatted into a string)
  torch.cuda.set_device(...) statement                 ->  removed (the setup block does it)

  torch.device("cuda:" + str(args.gpu)), f"cuda:{args.gpu}", "cuda:{}".format(opt.gpu)
                                                       ->  DEVICE
  torch.device(args.device)  ->  (DEVICE if "cuda" in str(args.device) else torch.device(...))

DEVICE is the local rank's GPU when CUDA is available and the CPU otherwise, so a
script converted here runs on CPU-only machines too. A device read at run time (the
command line, a config) that names a GPU becomes the local rank's; another (`--device
cpu`) is kept. Won't: `.to(args.device)` without a torch.device.

A script that names no GPU and no device anywhere (no `cuda`, `gpu` or `device` in a
name, an attribute or a string of the project), or names no GPU and the CPU as its device
(`device = "cpu"`), trains on the CPU wherever it runs:
converted (`--to ddp` and `--to fsdp`), each rank does too, with gloo, also on a machine
with GPUs (`Context.on_cpu`). Moving only the model to the GPU would leave its batches,
targets and losses on the CPU: the first step would fail on "Expected all tensors to be
on the same device" (seen on a GPU machine with such a script converted the other way).
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, dotted, positional, string_value
from distrun.convert.build import Rewrite, code_of, constant, expression
from distrun.convert.context import Context, Transform
from distrun.convert.transforms.setup import runs_nothing

_CUDA_STRING = re.compile(r"^cuda(:0)?$")
_GPU_WORDS = re.compile(r"cuda|gpu|device", re.IGNORECASE)
# `torch.accelerator.current_accelerator()` (pytorch/examples' scripts), `--accel`, mps...
_GPU_NAMES = re.compile(r"cuda|gpu|accel|(?<![a-z])(mps|xpu)(?![a-z])", re.IGNORECASE)
_OTHER_DEVICES = ("mps", "xpu", "tpu", "hpu", "npu")
# (not a count: `n_gpu`, `num_gpu`)
_GPU_INDEX_NAME = re.compile(r"^(?!n_|num_)(.*_)?(device|gpu|gpu_id|device_id|cuda_device)$")


def plan_devices(ctx: Context) -> None:
    facts, plan = ctx.facts, ctx.plan
    dev = ctx.names.device
    for call in facts.calls:
        func = call.func
        name = facts.call_name(call)
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and name != "torch.cuda":
            if dotted(func.value) == "torch" or isinstance(
                    facts.local_definition(call), cst.FunctionDef):
                continue  # `utils.cuda(xs)`: a function of the project named cuda
            plan.rewrite(call, _cuda_to_device(dev))
            plan.change(call, "device.cuda_call",
                        f"`.cuda()` -> `.to({dev})`: the local rank's device")
        elif name == "torch.device" and len(positional(call)) == 2:
            first = string_value(positional(call)[0].value)
            if first == "cuda":
                plan.rewrite(call, lambda _node: expression(dev))
                plan.change(call, "device.torch_device", f"`torch.device(\"cuda\", N)` -> `{dev}`")
        elif name == "torch.cuda.set_device":
            if isinstance(facts.parent.get(call), cst.Expr):
                plan.remove(facts.parent[call])
                plan.change(call, "device.set_device",
                            "removed `torch.cuda.set_device(...)`: the setup "
                            "block sets the local rank's GPU")
    for string in facts.strings:
        value = string_value(string)
        if value is not None and _CUDA_STRING.match(value) and _is_device_context(facts, string):
            plan.rewrite(string, lambda _node: expression(dev))
            plan.change(string, "device.string",
                        f"device {value!r} -> `{dev}` (the local rank's device)")
    _plan_indexed_strings(ctx)
    _plan_read_devices(ctx)
    _plan_gpu_index(ctx)
    _plan_device_tests(ctx)
    # (a module that only defines things may be given its device by the script using it)
    how = None if runs_nothing(facts.entry.module) else cpu_only(facts)
    if how and ctx.options.target == "deepspeed":
        plan.finding(None, "deepspeed.cpu_batches",
                     f"the script {how}: its batches stay on the CPU, "
                     "while DeepSpeed puts the model on the GPU where there is one: on a "
                     "machine with GPUs the first step would fail (\"Expected all tensors to "
                     "be on the same device\")", "move each batch to a device in the script "
                     "(`device = torch.device(\"cuda\")`, `x.to(device)`), or convert with "
                     "--to ddp, which keeps such a script on the CPU")
    if how and ctx.options.target in ("ddp", "fsdp"):
        ctx.on_cpu = True
        plan.finding(None, "device.cpu_script",
                     f"the script {how}: it trains on the CPU, and so does each rank (gloo), "
                     "also on a machine with GPUs", "to train on GPUs, move the model and each "
                     "batch to a device in the script (`device = torch.device(\"cuda\")`, "
                     "`model.to(device)`, `x.to(device)`) and convert it again: each rank "
                     "then takes its own GPU", severity="info")


def cpu_only(facts: Facts) -> str | None:
    """How the project says it trains on the CPU, or None: no name, attribute or string
    says `cuda`, `gpu` or `accel` (`torch.accelerator`; nor an "mps"/"xpu" device), and it
    names no device at all or names the CPU as one (`device = "cpu"`)."""
    if any(_GPU_NAMES.search(node.value) for node in facts.names):
        return None
    strings = [value for node in facts.strings if (value := string_value(node)) is not None]
    if any(_GPU_NAMES.search(value) or value.split(":")[0] in _OTHER_DEVICES
           for value in strings):
        return None
    if "cpu" in strings:
        return "names the CPU as its only device (\"cpu\")"
    if any(_GPU_WORDS.search(node.value) for node in facts.names) or any(
            _GPU_WORDS.search(value) for value in strings):
        return None
    return "names no GPU and no device (no `.cuda()`, `.to(device)`, \"cuda\")"


TRANSFORM = Transform("device", plan_devices)


def _plan_device_tests(ctx: Context) -> None:
    """`device == "cuda"` (`!=`): a device that became `DEVICE` (a torch.device, "cuda:N")
    no longer equals the string, so `cudnn.benchmark = True` behind it would be skipped
    silently: `str(device).startswith("cuda")` is true for both."""
    facts = ctx.facts
    _plan_string_reads(ctx)
    for string in facts.strings:
        if string_value(string) not in ("cuda", "cuda:0"):
            continue
        target = facts.parent.get(string)
        comparison = facts.parent.get(target) if isinstance(target, cst.ComparisonTarget) \
            else None
        if not isinstance(comparison, cst.Comparison) or len(comparison.comparisons) != 1:
            continue
        operator = comparison.comparisons[0].operator
        other = dotted(comparison.left)
        if not isinstance(operator, (cst.Equal, cst.NotEqual)) or other is None or \
                "device" not in other.lower():
            continue
        negate = "not " if isinstance(operator, cst.NotEqual) else ""
        new = f'{negate}str({other}).startswith("cuda")'
        ctx.plan.rewrite(comparison, lambda _n, new=new: expression(new))  # type: ignore[misc]
        ctx.plan.change(comparison, "device.compare", f"`{facts.code(comparison)}` -> `{new}`: the "
                        "device is now the local rank's, \"cuda:N\"")


_DEVICE_NAME = re.compile(r"(^|\.)\w*device$", re.IGNORECASE)  # `device`, `args.device`
_STR_METHODS = frozenset({"startswith", "endswith", "split", "lower", "upper", "replace",
                          "find", "index", "strip"})


def _plan_string_reads(ctx: Context) -> None:
    """`"cuda" in device`, `device.startswith("cuda")`: a device name read as a string,
    which is now `DEVICE` (a torch.device: `in` raises TypeError, `.startswith` an
    AttributeError, on a GPU machine only). It is read as `str(device)` (a string is
    its own `str`)."""
    facts = ctx.facts
    for string in facts.strings:
        comparison = facts.parent.get(string)
        if not (string_value(string) or "").startswith("cuda") or not isinstance(
                comparison, cst.Comparison) or comparison.left is not string or len(
                comparison.comparisons) != 1 or not isinstance(
                comparison.comparisons[0].operator, (cst.In, cst.NotIn)):
            continue
        right = comparison.comparisons[0].comparator
        if _DEVICE_NAME.search(dotted(right) or "") is None:
            continue
        ctx.plan.rewrite(right, lambda n: expression(f"str({code_of(n)})"))
        ctx.plan.change(comparison, "device.compare", f"`{facts.code(comparison)}`: the "
                        f"device is now a torch.device, read as `str({facts.code(right)})`")
    for call in facts.calls:
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _STR_METHODS or \
                _DEVICE_NAME.search(dotted(func.value) or "") is None:
            continue
        ctx.plan.rewrite(func.value, lambda n: expression(f"str({code_of(n)})"))
        ctx.plan.change(call, "device.compare", f"`{facts.code(call)}`: the device is now a "
                        f"torch.device, read as `str({facts.code(func.value)})`")


def _cuda_to_device(dev: str) -> Rewrite:
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        kept = [a for a in node.args if a.keyword is not None and a.keyword.value != "device"]
        args = [cst.Arg(expression(dev)), *kept]
        if kept:
            args[0] = args[0].with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            )
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=args)

    return rewrite


def _plan_indexed_strings(ctx: Context) -> None:
    """`torch.device("cuda:" + str(args.gpu))`, `f"cuda:{opt.gpu_id}"`, `"cuda:{}".format(
    cfg.device)`, `"cuda:%d" % args.gpu`: a GPU index read from the command line or a
    config, the same on every rank (all on that GPU), and no GPU on a CPU machine."""
    facts, dev = ctx.facts, ctx.names.device
    for string in facts.strings:
        value = string_value(string)
        parent = facts.parent.get(string)
        if value is None or not value.startswith("cuda:"):
            continue
        whole: cst.BaseExpression | None = None
        index: cst.BaseExpression | None = None
        if isinstance(parent, cst.BinaryOperation) and parent.left is string and (
                isinstance(parent.operator, cst.Add) and value == "cuda:"
                or isinstance(parent.operator, cst.Modulo) and value in ("cuda:%d", "cuda:%s")):
            whole, index = parent, parent.right
        elif isinstance(parent, cst.Attribute) and parent.attr.value == "format" and \
                value == "cuda:{}" and isinstance(call := facts.parent.get(parent), cst.Call) \
                and len(call.args) == 1:
            whole, index = call, call.args[0].value
        if whole is None or index is None or not _read_index(index) or \
                not _is_device_context(facts, whole):
            continue
        code = facts.code(whole)
        ctx.plan.rewrite(whole, lambda _node: expression(dev))
        ctx.plan.change(whole, "device.string", f"device `{code}` (a GPU index the script "
                        f"reads) -> `{dev}`: the local rank's device, the CPU where there "
                        "is no GPU")
    for node in facts.nodes(cst.FormattedString):
        assert isinstance(node, cst.FormattedString)
        parts = node.parts
        if len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and \
                parts[0].value == "cuda:" and isinstance(parts[1], cst.FormattedStringExpression) \
                and _read_index(parts[1].expression) and _is_device_context(facts, node):
            code = facts.code(node)
            ctx.plan.rewrite(node, lambda _node: expression(dev))
            ctx.plan.change(node, "device.string", f"device `{code}` (a GPU index the script "
                            f"reads) -> `{dev}`: the local rank's device, the CPU where there "
                            "is no GPU")


def _plan_read_devices(ctx: Context) -> None:
    """`torch.device(device)`, `torch.device(args.device)`: a device the script reads at
    run time ("cuda:0" by default): a GPU becomes the local rank's, another device stays."""
    facts, dev = ctx.facts, ctx.names.device
    for call in facts.calls:
        args = positional(call)
        if facts.call_name(call) != "torch.device" or len(call.args) != 1 or len(args) != 1 \
                or not isinstance(args[0].value, (cst.Name, cst.Attribute, cst.Subscript)):
            continue
        read = facts.code(args[0].value)
        code = f'({dev} if "cuda" in str({read}) else {facts.code(call)})'
        ctx.plan.rewrite(call, _replaced_by(code))
        ctx.plan.change(call, "device.string", f"`torch.device({read})` (a device the script "
                        f"reads at run time) -> `{dev}` when it names a GPU: the local rank's "
                        "GPU, not the one it names; any other device as it is")


def _replaced_by(code: str) -> Rewrite:
    return lambda _node: expression(code)


def _read_index(index: cst.BaseExpression) -> bool:
    """`args.gpu`, `str(opt.gpu_id)`, `cfg["device"]`: read from options or a config."""
    if isinstance(index, cst.Call) and dotted(index.func) in ("str", "int") and \
            len(index.args) == 1:
        index = index.args[0].value
    return isinstance(index, (cst.Attribute, cst.Subscript))


def _is_device_context(facts: Facts, string: cst.BaseExpression) -> bool:
    """Is this "cuda" literal used as a device (rather than, say, a log message)?"""
    node: cst.CSTNode = string
    for anc in facts.ancestors(string):
        if isinstance(anc, cst.IfExp) or isinstance(anc, cst.Arg) and anc.keyword is None:
            node = anc
            continue
        if isinstance(anc, cst.Arg):
            kw = anc.keyword.value if anc.keyword else ""
            return kw in ("device", "map_location")
        if isinstance(anc, cst.Call):
            name = facts.call_name(anc) or ""
            func = anc.func
            is_to = isinstance(func, cst.Attribute) and func.attr.value == "to"
            first = positional(anc)[:1]
            return (name == "torch.device" or is_to) and bool(first) and first[0] is node
        if isinstance(anc, (cst.Assign, cst.AnnAssign)):
            targets = (
                [t.target for t in anc.targets] if isinstance(anc, cst.Assign) else [anc.target]
            )
            return any("device" in (dotted(t) or "").lower() for t in targets)
        return False
    return False


def _plan_gpu_index(ctx: Context) -> None:
    """`device = 0` / `gpu = 0`: an integer GPU index becomes the local rank's device
    (an index would fail on a machine without CUDA), or the local rank itself where the
    name is formatted into a string (`f"cuda:{gpu}"`)."""
    facts, plan = ctx.facts, ctx.plan
    for node in facts.names:
        parent = facts.parent.get(node)
        if not isinstance(parent, cst.AssignTarget) or not _GPU_INDEX_NAME.search(node.value):
            continue
        assign = facts.parent.get(parent)
        if (
            isinstance(assign, cst.Assign)
            and isinstance(assign.value, cst.Integer)
            and assign.value.value == "0"
        ):
            formatted = any(other.value == node.value and any(
                isinstance(a, (cst.FormattedString, cst.BinaryOperation))
                for a in facts.ancestors(other)) for other in facts.names)
            new = ctx.names.local_rank if formatted else ctx.names.device
            plan.rewrite(assign.value, constant(expression(new)))
            plan.change(assign, "device.gpu_index", f"GPU index `{node.value} = 0` -> `{new}`" + (
                "" if formatted else " (the local rank's GPU, or the CPU without CUDA)"))
