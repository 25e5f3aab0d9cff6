"""DeepSpeed (`--to deepspeed`): the model and its optimizer become a DeepSpeed engine.

    optimizer = SGD(model.parameters())    ->  optimizer = SGD(model.parameters())
                                               model_engine = deepspeed.initialize(
                                                   model=model, optimizer=optimizer,
                                                   config=os.environ["DS_CONFIG"])[0]
    loss = crit(model(x), y)               ->  loss = crit(model_engine(x), y)
    loss.backward()                        ->  model_engine.backward(loss)
    clip_grad_norm_(params, 1.0)           ->  (removed: "gradient_clipping": 1.0)
    optimizer.step()                       ->  model_engine.step()

Everything else is the DDP conversion: sharded loaders, rank-0 output and saves, the
process group (DeepSpeed joins the one the script starts). Every other use of the model
keeps the module itself: under ZeRO-1/2 each rank holds all the weights, so
`model.state_dict()` saved by rank 0 loads into the original model. `optimizer` stays
the script's torch optimizer (its learning-rate scheduler keeps working): ZeRO shards
its state, and `engine.step()` steps it. ds_config.json (see `convert.dsconfig`) is
written beside the output; the script reads it from $DS_CONFIG, by default beside itself.

Gradient accumulation (the step under a condition) keeps the script's condition:
`managed_gradient_accumulation: false` makes each `engine.step()` a step, and
`engine.backward(loss, scale_wrt_gas=False)` keeps the script's own loss scaling.

Won't (the script is left unconverted, with the reason and the fix): several models,
a model updated by hand, clipping DeepSpeed cannot do (by value, another norm, a
max_norm it cannot read), mixed precision kept as code (`--amp fp16|bf16|none` moves it
into the config), apex, an optimizer state loaded from a file distrun cannot trace
(the saves and loads it can trace go through the engine: see `ds_checkpoint`).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert import dsconfig
from distrun.convert.analysis import keyword, positional, walk
from distrun.convert.build import code_of, expression, statement
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward, is_optimizer_step, method_name, receiver
from distrun.convert.models import Home, Model
from distrun.convert.syntax import string_value
from distrun.convert.transforms import ds_checkpoint

_CLIP_NORM = frozenset({"torch.nn.utils.clip_grad_norm_",
                        "torch.nn.utils.clip_grad.clip_grad_norm_"})
_CLIP_OTHER = frozenset({"torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm",
                         "torch.nn.utils.clip_grad.clip_grad_value_"})
_AMP = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
        "torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler")
_INSTALL = "pip install 'distrun[deepspeed]' (or pip install deepspeed)"


def initialize(ctx: Context, model: Model, home: Home, target: str, name: str,
               anchor: cst.CSTNode, after: bool
               ) -> tuple[cst.BaseStatement, cst.CSTNode, bool] | None:
    """The statement that makes the engine of `name` (`target = deepspeed.initialize(...)[0]`)
    and where it goes: at `anchor`, or after the optimizer when that is built later in
    the same block. None (and the conversion refused) when the optimizer is out of reach."""
    facts, flow, n = ctx.facts, ctx.flow, ctx.names
    built = facts.statement(model.optimizer)
    small = built.body[0] if isinstance(built, cst.SimpleStatementLine) else None
    place = flow.place_of(small.targets[0].target) \
        if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
    reachable = sorted(p.code for p in flow.component(place) if p.scope is home.scope
                       and _plain(p.code, home)) if place is not None else []
    if not reachable or built is None or place is None:
        ctx.refuse(model.optimizer, f"the optimizer of `{name}` cannot be reached where its "
                   "DeepSpeed engine is made", "build the optimizer where the model is built "
                   "(same function or class), then convert again")
        return None
    optimizer = reachable[0]
    block = facts.parent.get(anchor)
    later = [stmt for stmt in getattr(block, "body", ()) if any(
        facts.inside(b, stmt) for p in flow.component(place) if p.code == optimizer
        for b in flow.bindings(p)) and facts.line(stmt) >= facts.line(anchor)]
    if later and not (after and later[-1] is anchor):
        anchor, after = later[-1], True
    binding = _in_block(ctx, block, built) if block is not None else None
    loads = [_in_block(ctx, block, c) for c in ds_checkpoint.optimizer_loads(
        ctx, is_model_optimizer)] if block is not None else []
    if binding is not None and any(s is not None and facts.line(binding) < facts.line(s)
                                   < facts.line(anchor) for s in loads):
        anchor, after = binding, True  # the engine loads the optimizer's state: made before
    ctx.need("deepspeed", "os", at=anchor)
    code = (f"{target} = deepspeed.initialize(model={name}, optimizer={optimizer}, "
            f'config={n.os}.environ["DS_CONFIG"])[0]\n')
    return statement(code), anchor, after


def _in_block(ctx: Context, block: cst.CSTNode, node: cst.CSTNode | None
              ) -> cst.CSTNode | None:
    """The statement of `block` that holds `node`."""
    return next((stmt for stmt in getattr(block, "body", ())
                 if node is not None and ctx.facts.inside(node, stmt)), None)


def _plain(code: str, home: Home) -> bool:
    """Is `code` a plain local name, or for a class home `self.<name>`?"""
    if home.kind == "class":
        return code.startswith("self.") and code.count(".") == 1
    return "." not in code and not code.startswith("<")


def plan_deepspeed(ctx: Context) -> None:
    _refuse_what_cannot_move(ctx)
    if ctx.refusal is not None:
        return
    model = ctx.models[0]
    clipping = _clipping(ctx)
    steps = [c for c in ctx.facts.calls if is_optimizer_step(c) and _conditional(ctx, c)]
    for call in ctx.facts.calls:
        if is_backward(call):
            _backward(ctx, call, accumulating=bool(steps))
        elif is_optimizer_step(call):
            _step(ctx, call)
        elif method_name(call) == "zero_grad" and is_model_optimizer(ctx, call):
            _zero_grad(ctx, call)
    for call in ds_checkpoint.optimizer_loads(ctx, is_model_optimizer):
        _load(ctx, call)
    if ctx.refusal is not None:
        return
    _local_rank_argument(ctx)
    ds_checkpoint.convert_saves(ctx, is_model_optimizer, engine_at)
    _write_config(ctx, model, clipping, _accumulation(ctx, steps))


TRANSFORM = Transform("deepspeed", plan_deepspeed, lambda options: options.target == "deepspeed")


def engine_at(ctx: Context, site: cst.CSTNode) -> str | None:
    """The engine as code where `site` runs: what the model's training forward passes
    call in the same function, or `self.<engine>` in a method of the class that holds it."""
    facts = ctx.facts
    func = facts.function(site)
    for model in ctx.models:
        for call in model.forwards:
            if id(call) in ctx.ddp_calls and facts.function(call) is func:
                return ctx.ddp_calls[id(call)]
        for call in model.forwards:
            home = model.homes.get(id(call))
            code = ctx.ddp_calls.get(id(call), "")
            if home is not None and home.kind == "class" and func is not None and any(
                    a is home.scope for a in facts.ancestors(func)) and code.startswith("self."):
                return code
    return None


def _refuse_what_cannot_move(ctx: Context) -> None:
    facts = ctx.facts
    if len(ctx.models) != 1:
        where = ctx.models[1].optimizer if len(ctx.models) > 1 else None
        ctx.refuse(where, "DeepSpeed needs one model trained by one optimizer: "
                   f"{len(ctx.models)} found", "convert to DDP (--to ddp), or make one engine "
                   "per model with deepspeed.initialize yourself")
        return
    if isinstance(ctx.models[0].optimizer, cst.For):
        ctx.refuse(ctx.models[0].optimizer, "this model is updated by hand, without an "
                   "optimizer: DeepSpeed needs one", "use a torch.optim optimizer, or --to ddp")
    for call in facts.calls:
        name = facts.call_name(call) or ""
        if name.startswith("apex."):
            ctx.refuse(call, "apex mixed precision cannot move into a DeepSpeed config "
                       "automatically", "convert with --to ddp first (it migrates apex), or "
                       "remove apex and set fp16/bf16 in ds_config.json")
        elif name in _AMP and ctx.options.amp == "keep":
            ctx.refuse(call, "mixed precision written in code: under DeepSpeed it is set in "
                       "ds_config.json", "convert with --amp fp16, --amp bf16 or --amp none: "
                       "distrun removes autocast and the GradScaler and sets the config")
        elif method_name(call) == "load_state_dict" and is_model_optimizer(ctx, call) \
                and ds_checkpoint.load_path(ctx, call) is None:
            ctx.refuse(call, "the optimizer's state is loaded from a checkpoint distrun "
                       "cannot trace to its `torch.load(path)`: under ZeRO each rank holds a "
                       "shard of it, so this resume would be wrong", "load it with "
                       "`state = torch.load(path)` in the same function, or resume with "
                       "`engine.load_checkpoint(dir)` after `engine.save_checkpoint(dir)` "
                       "on every rank")
        elif name in _CLIP_OTHER:
            ctx.refuse(call, f"`{facts.code(call.func)}`: DeepSpeed clips only by the "
                       "gradients' global 2-norm", "use clip_grad_norm_ (it moves into "
                       "gradient_clipping), or --to ddp")


def is_model_optimizer(ctx: Context, call: cst.Call) -> bool:
    """Is `call` a method of the model's optimizer, wherever it went (`optimizer`,
    `self.optimizer`, a function's parameter)?"""
    optimizer = ctx.models[0].optimizer if len(ctx.models) == 1 else None
    built = ctx.facts.parent.get(optimizer) if optimizer is not None else None
    if not (isinstance(call.func, cst.Attribute) and isinstance(built, cst.Assign)
            and len(built.targets) == 1):
        return False
    flow = ctx.flow
    place = flow.place_of(flow.strip(call.func.value))
    return place is not None and flow.same(place, flow.place_of(built.targets[0].target))


def _conditional(ctx: Context, step: cst.Call) -> bool:
    """Is `step` inside an `if` that holds no backward pass (it skips some batches)?"""
    facts = ctx.facts
    for node in facts.ancestors(step):
        if isinstance(node, (cst.FunctionDef, cst.For, cst.While)):
            return False
        if isinstance(node, cst.If) and not any(is_backward(c) for c in facts.calls_in(node)):
            return True
    return False


def _clipping(ctx: Context) -> tuple[float, str, cst.Call | None]:
    """The max_norm of the script's clip_grad_norm_ (its statement removed), or 0.0."""
    facts, plan = ctx.facts, ctx.plan
    found: tuple[float, str, cst.Call | None] = (0.0, "no clip_grad_norm_ in the script", None)
    for call in facts.calls:
        if facts.call_name(call) not in _CLIP_NORM:
            continue
        args = positional(call)
        norm = keyword(call, "max_norm") or (args[1] if len(args) > 1 else None)
        kind = keyword(call, "norm_type") or (args[2] if len(args) > 2 else None)
        value = dsconfig.constant(facts, norm.value) if norm is not None else None
        parent = facts.parent.get(call)
        if value is None or kind is not None and facts.code(kind.value) not in ("2", "2.0"):
            ctx.refuse(call, "this clipping cannot move into ds_config.json: its max_norm is "
                       "not a constant, or its norm is not 2", "clip by a fixed 2-norm, or "
                       "--to ddp")
            continue
        if not isinstance(parent, cst.Expr):
            ctx.refuse(call, "the gradient norm clip_grad_norm_ returns is used: under "
                       "DeepSpeed the engine clips", "use `engine.get_global_grad_norm()` "
                       "after `engine.step()` instead, then convert again")
            continue
        if found[2] is not None and found[0] != value.number:
            ctx.refuse(call, "two clip_grad_norm_ calls with different max_norm",
                       "use one max_norm")
        plan.remove(parent)
        plan.change(call, "deepspeed", f"`{facts.code(call.func)}(...)` removed: the engine "
                    f"clips at max_norm {value.number:g} (gradient_clipping in "
                    f"{dsconfig.FILENAME})")
        found = (value.number, value.how, call)
    return found


def _accumulation(ctx: Context, steps: list[cst.Call]) -> int:
    """Gradient accumulation: the script steps under its own condition, so DeepSpeed is
    told not to count micro-steps (`managed_gradient_accumulation: false`: every
    `engine.step()` is a boundary). The count, for DeepSpeed's batch arithmetic, is the
    `% N` of the condition. 0 when the script does not accumulate."""
    if not steps:
        return 0
    facts, plan = ctx.facts, ctx.plan
    tests = [node.test for c in steps for node in facts.ancestors(c) if isinstance(node, cst.If)]
    counts = {int(v.number) for t in tests for node in walk(t)
              if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)
              and (v := dsconfig.constant(facts, node.right)) is not None}
    count = counts.pop() if len(counts) == 1 else 1
    plan.change(steps[0], "deepspeed", "the optimizer steps under the script's condition: "
                "managed_gradient_accumulation false, so each engine.step() is an optimizer "
                f"step; gradient_accumulation_steps {count}" + (
                    " (the condition's modulus)" if count > 1 else
                    " (no single `% N` in the condition: DeepSpeed's throughput logs count "
                    "one micro-batch per step)"))
    inside = {id(c) for node in facts.ancestors(steps[0]) if isinstance(node, cst.If)
              for c in facts.calls_in(node)}
    if ctx.options.zero >= 2:  # measured: ZeRO-1 drops them, ZeRO-2 and 3 do not
        for call in facts.calls:
            if method_name(call) == "zero_grad" and is_model_optimizer(ctx, call) \
                    and id(call) not in inside:
                plan.finding(call, "deepspeed", f"under ZeRO-{ctx.options.zero} this "
                             "zero_grad() cannot drop the gradients of micro-batches that have "
                             "not stepped yet (ZeRO keeps them in its own buffers): if an "
                             "epoch's batches per rank "
                             "are not a multiple of the accumulation count, the left-over "
                             "ones go into the next step, where the original drops them",
                             "convert with --zero 1, or make every epoch's batch count a "
                             "multiple of the accumulation count")
    return count


def _backward(ctx: Context, call: cst.Call, accumulating: bool) -> None:
    engine = engine_at(ctx, call)
    assert isinstance(call.func, cst.Attribute)
    loss = ctx.facts.code(call.func.value)
    if isinstance(call.func.value, cst.Call) and call.func.value.args:  # scaler.scale(loss)
        loss = ctx.facts.code(call.func.value.args[0].value)
    if engine is None:
        ctx.refuse(call, f"`{loss}.backward()` runs where no DeepSpeed engine can be reached",
                   "compute the loss and call backward where the model's forward pass runs")
        return

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        rest = "".join(", " + code_of(a).rstrip(", ") for a in node.args)
        if accumulating:  # the script scales its loss itself, as before
            rest += ", scale_wrt_gas=False"
        return expression(f"{engine}.backward({code_of(node.func.value)}{rest})")

    ctx.plan.rewrite(call, rewrite)
    ctx.plan.change(call, "deepspeed", f"`{ctx.facts.code(call)}` -> `{engine}.backward({loss})`: "
                    "the engine reduces the gradients into each rank's ZeRO shard")


def _step(ctx: Context, call: cst.Call) -> None:
    engine = engine_at(ctx, call)
    if engine is None:
        ctx.refuse(call, f"`{ctx.facts.code(call)}` runs where no DeepSpeed engine can be "
                   "reached", "step the optimizer where the model's forward pass runs")
        return
    ctx.plan.rewrite(call, lambda _n: expression(f"{engine}.step()"))
    ctx.plan.change(call, "deepspeed", f"`{ctx.facts.code(call)}` -> `{engine}.step()`: it "
                    "clips, steps the sharded optimizer, gathers the weights and zeroes the "
                    "gradients")


def _zero_grad(ctx: Context, call: cst.Call) -> None:
    """`optimizer.zero_grad()` would drop the gradient buffers ZeRO-Offload keeps on the
    optimizer's shard: the engine's zero_grad() clears the model's gradients instead."""
    engine = engine_at(ctx, call)
    parent = ctx.facts.parent.get(call)
    if engine is not None:
        ctx.plan.rewrite(call, lambda _n: expression(f"{engine}.zero_grad()"))
        ctx.plan.change(call, "deepspeed", f"`{ctx.facts.code(call)}` -> `{engine}.zero_grad()` "
                        "(the optimizer's own would drop the buffers ZeRO keeps on its shard)")
    elif isinstance(parent, cst.Expr):
        ctx.plan.remove(parent)
        ctx.plan.change(call, "deepspeed", f"`{ctx.facts.code(call)}` removed: the engine's "
                        "step() zeroes the gradients")
    else:
        ctx.refuse(call, f"`{ctx.facts.code(call)}` would drop the gradient buffers ZeRO keeps",
                   "remove it: the engine's step() zeroes the gradients")


def _local_rank_argument(ctx: Context) -> None:
    """The deepspeed launcher passes --local_rank=N: an argparse parser must accept it."""
    facts = ctx.facts
    adds = [c for c in facts.calls if method_name(c) == "add_argument"]
    if any(string_value(a.value) in ("--local_rank", "--local-rank")
           for c in adds for a in positional(c)):
        return
    for call in facts.calls:
        if method_name(call) != "parse_args" or call.args:
            continue
        parser = receiver(call)
        mine = [c for c in adds if receiver(c) == parser and facts.scope(c) is facts.scope(call)
                and facts.line(c) < facts.line(call)]
        stmt = facts.statement(mine[-1] if mine else call)
        if stmt is None or parser is None:
            continue
        new = statement(f'{parser}.add_argument("--local_rank", "--local-rank", type=int, '
                        'default=0, help="set by the deepspeed launcher (LOCAL_RANK is read '
                        'from the environment)")\n')
        (ctx.plan.insert_after if mine else ctx.plan.insert_before)(stmt, [new])
        ctx.plan.change(stmt, "deepspeed", f"`{parser}` accepts --local_rank, which the "
                        "deepspeed launcher passes")


def _load(ctx: Context, call: cst.Call) -> None:
    engine, path = engine_at(ctx, call), ds_checkpoint.load_path(ctx, call)
    if engine is None or path is None:
        ctx.refuse(call, "the optimizer's state is loaded where no DeepSpeed engine can be "
                   "reached", "resume where the model is trained, with "
                   "`engine.load_checkpoint(dir)`")
        return
    ds_checkpoint.convert_load(ctx, call, engine, path)


def _write_config(ctx: Context, model: Model,
                  clipping: tuple[float, str, cst.Call | None], accumulation: int) -> None:
    facts, plan = ctx.facts, ctx.plan
    loader = ctx.train_loaders[0] if ctx.train_loaders else None
    micro = dsconfig.micro_batch(facts, loader)
    if micro is None:
        plan.finding(loader, "deepspeed", "the training batch size cannot be read from the "
                     f"script: train_micro_batch_size_per_gpu is 1 in {dsconfig.FILENAME}",
                     "set it to the per-process batch size (DeepSpeed uses it in its "
                     "throughput logs; the DataLoader still decides the batch)")
    else:
        plan.change(loader or model.optimizer, "deepspeed", "train_micro_batch_size_per_gpu "
                    f"{int(micro.number)} ({micro.how})")
    optimizer_name = facts.call_name(model.optimizer) if isinstance(model.optimizer, cst.Call) \
        else None
    untested = optimizer_name not in dsconfig.ZERO_TESTED
    if untested:
        plan.change(model.optimizer, "deepspeed", f"zero_allow_untested_optimizer: "
                    f"`{optimizer_name}` is not one DeepSpeed tests under ZeRO (it runs it, "
                    "element-wise on each shard)")
    clip, how, where = clipping
    plan.change(where or model.optimizer, "deepspeed", f"gradient_clipping {clip:g} ({how}; "
                "written out because DeepSpeed 0.19.8 otherwise clips at 1.0)")
    data = dsconfig.config(ctx.options, int(micro.number) if micro else 1, clip, untested,
                           accumulation)
    ctx.files[dsconfig.FILENAME] = dsconfig.text(data)
    n = ctx.names
    beside = '"ds_config.json"' if facts.entry.path.endswith(".ipynb") else (
        f'{n.os}.path.join({n.os}.path.dirname({n.os}.path.abspath(__file__)), '
        '"ds_config.json")')
    ctx.setup_lines.append(
        f'{n.os}.environ.setdefault("LOCAL_RANK", str({n.local_rank}))  # deepspeed.initialize '
        'reads it\n'
        f"# DeepSpeed's settings (ZeRO stage, batch, clipping): $DS_CONFIG, else "
        f"{dsconfig.FILENAME} beside this script\n"
        f'{n.os}.environ.setdefault("DS_CONFIG", {beside})\n')
