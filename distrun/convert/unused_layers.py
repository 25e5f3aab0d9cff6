"""Layers a model builds and never uses (for the DDP target's wrap).

    class EncoderRNN(nn.Module):
        def __init__(self, ...):
            self.gru = nn.GRU(...)
            self.combine = nn.Linear(2 * hidden, hidden)   # never read again
        def forward(self, x): ...                           # uses self.gru only

DDP expects a gradient for every parameter at every step: the first step goes through,
the second stops on every rank with "Expected to have finished reduction in the prior
iteration ... Parameter indices which did not receive grad". A layer set on `self` in
the model class's `__init__` (or a class it derives from) and read nowhere else in the
family's methods gets none, nor does one `forward` calls without its output reaching what
the training calls keep (dead_outputs.py): the wrap passes `find_unused_parameters=True`,
said with the layer's line. Only what is certain counts: a class that reaches its
attributes by name (`getattr(self, ...)`, `self.__dict__`, `self.children()`,
`self.modules()`, `setattr`) is left alone. A layer whose output is dropped further away
(in a function the forward's result goes through) is not seen here; launch's report gives
the hint when DDP stops on it.
"""

from __future__ import annotations

import re

import libcst as cst

from distrun.convert.analysis import Facts, dotted, walk
from distrun.convert.context import Context
from distrun.convert.dead_outputs import kept_positions, live_attributes
from distrun.convert.models import Model

_BY_NAME = frozenset({"getattr", "setattr", "hasattr", "vars"})
_WALKS = frozenset({"children", "modules", "named_children", "named_modules", "__dict__",
                    "_modules"})


NEVER = "is built and never used"
DEAD = "is called in `forward`, but no output the training keeps depends on it"


def unused_layers(ctx: Context, model: Model) -> list[tuple[str, cst.CSTNode, str]]:
    """(`Class.attribute`, the assignment, how it goes without a gradient) of each layer
    the model's classes build in `__init__` and never read, read in `forward` only where
    no kept output depends on it, or called there only under `torch.no_grad()` or under
    an `if` on forward's arguments (a step may not use it)."""
    found: list[tuple[str, cst.CSTNode, str]] = []
    kept = kept_positions(model.forwards, ctx.facts.parent)
    for cls in sorted(ctx.flow.instances(model.place), key=lambda c: ctx.facts.line(c)):
        family = _family(ctx, cls)
        if any(_by_name(ctx, member) for member in family):
            continue
        forward = next((f for f in (ctx.facts.method(m, "forward") for m in family)
                        if f is not None), None)
        read = set().union(*(_read(member, forward) for member in family))
        live = live_attributes(forward, kept) if forward is not None else set()
        sometimes = _sometimes_idle(ctx, forward) if forward is not None else {}
        frozen = _frozen(family)
        for member in family:
            init = ctx.facts.method(member, "__init__")
            for attr, node in _layers_set(ctx, init) if init is not None else []:
                if attr not in read and attr not in live:
                    called = forward is not None and attr in _read(forward, None)
                    found.append((f"{member.name.value}.{attr}", node, DEAD if called
                                  else NEVER))
                elif attr in sometimes and attr not in read and attr not in frozen:
                    found.append((f"{member.name.value}.{attr}", node, sometimes[attr]))
            for attr, node, test in _parameters_under_settings(ctx, family, init):
                found.append((f"{member.name.value}.{attr}", node,
                              f"is read only when `{test}` holds (a setting of the model)"))
            for attr, node in _modules_set(ctx, init) if init is not None else []:
                parts = _piecemeal(family, attr)
                if parts and attr not in frozen and not any(
                        f == f"{member.name.value}.{attr}" for f, _, _ in found):
                    found.append((f"{member.name.value}.{attr}", node, PARTS.format(
                        ", ".join(f"`{p}`" for p in parts))))
    return found


PARTS = ("is never called whole, only its parts ({}) one by one: any other part it has "
         "(a ResNet's `fc`) gets no gradient")


def _parameters_under_settings(ctx: Context, family: list[cst.ClassDef],
                               init: cst.FunctionDef | None) -> list[tuple[str, cst.CSTNode, str]]:
    """`self.eps = nn.Parameter(...)` in `init`, read elsewhere only under an `if` on the
    model's settings (powerful-gnns' `if self.learn_eps:`): with the setting off, a run
    never gives it a gradient. (The test of the first such `if`, said.)"""
    found: list[tuple[str, cst.CSTNode, str]] = []
    facts = ctx.facts
    if init is None:
        return found
    for line in list(init.body.body):
        small = line.body[0] if isinstance(line, cst.SimpleStatementLine) else None
        if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Call) or \
                facts.call_name(small.value) != "torch.nn.Parameter":
            continue
        target = dotted(small.targets[0].target) or ""
        if not target.startswith("self.") or target.count(".") != 1:
            continue
        reads = [n for member in family for n in walk(member) if isinstance(n, cst.Attribute)
                 and dotted(n) == target and not facts.inside(n, init)
                 and not isinstance(facts.parent.get(n), cst.AssignTarget)]
        tests = [_setting_around(facts, family, n) for n in reads]
        if reads and all(t is not None for t in tests):
            first = tests[0]
            assert first is not None
            found.append((target.removeprefix("self."), line,
                          " ".join(facts.code(first).split())))
    return found


def _setting_around(facts: Facts, family: list[cst.ClassDef], node: cst.CSTNode,
                    depth: int = 0) -> cst.BaseExpression | None:
    """The test of an `if` on the model's settings around `node` in its method, or around
    every call of that method in the family (`if self.learn_eps: h = self.next_layer_eps(
    ...)`, one call deep); None where some way reaches it unconditioned."""
    for up in facts.ancestors(node):
        if isinstance(up, cst.If) and _settings(up.test):
            return up.test
        if isinstance(up, cst.FunctionDef):
            calls = [c for member in family for c in facts.calls_in(member)
                     if dotted(c.func) == f"self.{up.name.value}"]
            tests = [_setting_around(facts, family, c, depth + 1) for c in calls]
            return tests[0] if depth == 0 and calls and all(
                t is not None for t in tests) else None
    return None


def _modules_set(ctx: Context, init: cst.FunctionDef) -> list[tuple[str, cst.CSTNode]]:
    """`self.x = resnet.resnet18()`: a module made by the project (its class, or a factory
    function returning one) or by torchvision, in `init` or in its `if` branches."""
    found: list[tuple[str, cst.CSTNode]] = []
    for node in walk(init.body):
        if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not isinstance(
                node.value, cst.Call):
            continue
        target = dotted(node.targets[0].target) or ""
        made = ctx.facts.local_definition(node.value)
        if target.startswith("self.") and target.count(".") == 1 and (
                isinstance(made, (cst.FunctionDef, cst.ClassDef))
                or (ctx.facts.call_name(node.value) or "").startswith("torchvision.models.")):
            found.append((target.removeprefix("self."), node))
    return found


def _piecemeal(family: list[cst.ClassDef], attr: str) -> list[str]:
    """The parts of `self.attr` the family reads (`self.pretrained.conv1(x)`), where it
    never uses `self.attr` otherwise (called, passed, iterated): [] if it does."""
    parts: list[str] = []
    whole = False

    class Visit(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            nonlocal whole
            if dotted(node) == f"self.{attr}":
                whole = True
            inner = node.value
            if isinstance(inner, cst.Attribute) and dotted(inner) == f"self.{attr}":
                if node.attr.value not in parts:
                    parts.append(node.attr.value)
                return False
            return True

        def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
            return dotted(node.target) != f"self.{attr}"

    for member in family:
        member.visit(Visit())
    return [] if whole else parts


_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode"})


def _sometimes_idle(ctx: Context, forward: cst.FunctionDef) -> dict[str, str]:
    """The layers `forward` calls only under `torch.no_grad()` (their parameters never get
    a gradient) or only under an `if` whose test reads forward's arguments (`if y is not
    None:`: a step that passes None leaves it out), said for the report; a layer also
    called elsewhere in forward is not one of them."""
    facts = ctx.facts
    params = {p.name.value for p in forward.params.params[1:]}
    found: dict[str, str] = {}
    always: set[str] = set()

    def why(node: cst.CSTNode) -> str | None:
        for up in facts.ancestors(node):
            if up is forward:
                return None
            if isinstance(up, cst.With) and any(
                    (facts.call_name(i.item) if isinstance(i.item, cst.Call) else None)
                    in _NO_GRAD for i in up.items):
                return "is called in `forward` only under `torch.no_grad()`"
            if isinstance(up, cst.If) and (_reads(up.test, params) or _settings(up.test)):
                test = " ".join(facts.code(up.test).split())
                return f"is called in `forward` only when `{test}` holds"
        return None

    for call in facts.calls_in(forward):
        attr = dotted(call.func) or ""
        if not attr.startswith("self.") or attr.count(".") != 1:
            continue
        name = attr.removeprefix("self.")
        reason = why(call)
        if reason is None:
            always.add(name)
        else:
            found.setdefault(name, reason)
    found = {k: v for k, v in found.items() if k not in always}
    return {**found, **_detached(facts, forward)}


def _settings(test: cst.BaseExpression) -> bool:
    """Does an `if` test read the module's settings (`self.config.projection`,
    `self.use_bn`)? A layer under it may be left out for a whole run."""
    return any(isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
               and node.value.value == "self" for node in walk(test))


def _detached(facts: Facts, forward: cst.FunctionDef) -> dict[str, str]:
    """The layers whose output `forward` detaches (`x = self.embed(p)`, then `x =
    x.detach()`, `x.data`, `Variable(x.data)`, maybe under a setting: bucket_snli's
    `if self.config.fix_emb:`): their parameters get no gradient then."""
    made: dict[str, str] = {}
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or facts.function(assign) is not forward \
                or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            continue
        name, value = assign.targets[0].target.value, assign.value
        layer = dotted(value.func) if isinstance(value, cst.Call) else None
        if layer is not None and layer.startswith("self.") and layer.count(".") == 1:
            made[name] = layer.removeprefix("self.")
    found: dict[str, str] = {}
    for assign in facts.assigns:
        if not isinstance(assign, cst.Assign) or facts.function(assign) is not forward:
            continue
        for node in walk(assign.value):
            cut = isinstance(node, cst.Attribute) and node.attr.value == "data" or isinstance(
                node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                node.func.attr.value == "detach"
            inner = node.value if isinstance(node, cst.Attribute) else \
                node.func.value if isinstance(node, cst.Call) and isinstance(
                    node.func, cst.Attribute) else None
            if cut and isinstance(inner, cst.Name) and inner.value in made:
                code = " ".join(facts.code(assign).split())
                found.setdefault(made[inner.value], f"has its output detached in `forward` "
                                                    f"(`{code}`)")
    return found


def _reads(test: cst.BaseExpression, names: set[str]) -> bool:
    found: list[bool] = []

    class Visit(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value in names:
                found.append(True)

    test.visit(Visit())
    return bool(found)


def _frozen(family: list[cst.ClassDef]) -> set[str]:
    """Layers whose parameters the class itself stops from training
    (`for p in self.resnet.parameters(): p.requires_grad = False`,
    `self.resnet.requires_grad_(False)`): DDP leaves those out by itself."""
    frozen: set[str] = set()
    for member in family:
        code = cst.Module(body=[member]).code
        if "requires_grad" not in code:
            continue
        for attr in _read(member, None):
            if f"self.{attr}.parameters()" in code or f"self.{attr}.requires_grad_(" in code:
                frozen.add(attr)
    return frozen


def _family(ctx: Context, cls: cst.ClassDef) -> list[cst.ClassDef]:
    members: list[cst.ClassDef] = []
    current: cst.ClassDef | None = cls
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        members.append(current)
        current = ctx.flow.base_class(current)
    return members


# torch.nn layers with no parameter: idle or not, they give DDP nothing to wait for
_PARAMETERLESS = re.compile(
    r"(ReLU6?|LeakyReLU|RReLU|ELU|SELU|CELU|GELU|SiLU|Mish|Tanh|Sigmoid|Hardtanh|Hardswish|"
    r"Hardsigmoid|Softplus|Softsign|Tanhshrink|Softmax|Softmax2d|LogSoftmax|Softmin|"
    r"Dropout\w*|AlphaDropout|Identity|Flatten|Unflatten|\w*Pool\dd|Upsample\w*|"
    r"PixelShuffle|PixelUnshuffle|\w*Pad\dd|ChannelShuffle)$")


def _layers_set(ctx: Context, init: cst.FunctionDef) -> list[tuple[str, cst.CSTNode]]:
    """`self.x = nn.Layer(...)` (a torch.nn class, or a class of the project) in `init`."""
    found: list[tuple[str, cst.CSTNode]] = []
    lines = list(init.body.body)
    for branch in [s for s in lines if isinstance(s, cst.If)]:  # `if num_classes is not
        lines += list(branch.body.body)  # None: self.label_emb = ...`, one level down
    for line in lines:
        small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(
            line.body) == 1 else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not isinstance(
                small.value, cst.Call):
            continue
        target = dotted(small.targets[0].target) or ""
        name = ctx.facts.call_name(small.value) or ""
        layer = name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper() \
            and name not in ("torch.nn.Parameter", "torch.nn.ModuleList",
                             "torch.nn.ModuleDict", "torch.nn.ParameterList") \
            and not _PARAMETERLESS.match(name.rsplit(".", 1)[-1])
        own = ctx.facts.local_definition(small.value)
        if target.startswith("self.") and target.count(".") == 1 and (
                layer or isinstance(own, cst.ClassDef)):
            found.append((target.removeprefix("self."), line))
    return found


def _read(cls: cst.ClassDef | cst.FunctionDef, forward: cst.FunctionDef | None) -> set[str]:
    """The attributes of `self` read anywhere in the class but in `forward` (an
    assignment's target is not a read)."""
    read: set[str] = set()
    targets: set[int] = set()

    class Visit(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is not forward

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            targets.add(id(node.target))

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if isinstance(node.value, cst.Name) and node.value.value == "self" \
                    and id(node) not in targets:
                read.add(node.attr.value)

    cls.visit(Visit())
    return read


def _by_name(ctx: Context, cls: cst.ClassDef) -> bool:
    """Does the class reach its attributes by name or walk its submodules?"""
    for call in ctx.facts.calls_in(cls):
        if dotted(call.func) in _BY_NAME:
            return True
    walked: list[bool] = []

    class Visit(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:  # `self.children()`, not
            if node.attr.value in _WALKS and dotted(node.value) == "self":  # `net.children()`
                walked.append(True)

    cls.visit(Visit())
    return bool(walked)
