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
its state, and `engine.step()` steps it. ds_config.json (see `deepspeed_config`) is
written beside the output; the script reads it from $DS_CONFIG, by default beside itself.
A DeepSpeed config the user already has (named by the script's own option, or beside
it: `deepspeed_user`) is its base, each change reported (`deepspeed_merge`), and the
options not given (--zero, the precision under --amp keep) are that config's.

Gradient accumulation (the step under a condition) keeps the script's condition:
`managed_gradient_accumulation: false` makes each `engine.step()` a step, and
`engine.backward(loss, scale_wrt_gas=False)` keeps the script's own loss scaling.

Won't (the script is left unconverted, with the reason and the fix): several models,
a model updated by hand, clipping DeepSpeed cannot do (by value, another norm, a
max_norm it cannot read), mixed precision kept as code (`--amp fp16|bf16|none` moves it
into the config), apex, an optimizer state loaded from a file distrun cannot trace
(the saves and loads it can trace go through the engine: see `deepspeed_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst

from distrun.convert.analysis import positional
from distrun.convert.build import expression, statement
from distrun.convert.context import Context, Stage, Transform, Wrapping, WrapSite
from distrun.convert.idioms import is_backward, is_optimizer_step, method_name, receiver
from distrun.convert.models import Home
from distrun.convert.options import ConvertOptions
from distrun.convert.options import Target as TargetName
from distrun.convert.syntax import string_value
from distrun.convert.targets import deepspeed_checkpoint as ds_checkpoint
from distrun.convert.targets import deepspeed_settings, deepspeed_user, deepspeed_zero3
from distrun.convert.targets.base import (
    TorchDistributed,
    backward_through,
    in_module_class,
    is_model_optimizer,
    one_model_one_optimizer,
)

_CLIP_OTHER = frozenset({"torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm",
                         "torch.nn.utils.clip_grad.clip_grad_value_"})
_AMP = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
        "torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler")


class DeepSpeed(TorchDistributed):
    name: TargetName = "deepspeed"
    wrapper = "DeepSpeed engine"
    wrap_call = "`deepspeed.initialize`"
    launcher = "deepspeed"

    def __init__(self) -> None:
        self.user: deepspeed_user.UserConfig | None = None  # found at "prepared"

    def check_options(self, options: ConvertOptions, given: Mapping[str, Any]) -> None:
        if options.zero == 3 and options.eval_shard:
            raise ValueError("--eval shard does not apply to --zero 3: each forward pass of "
                             "the model gathers its weights from every rank, so every rank "
                             "must evaluate the same batches (use --eval full, or --zero 2)")
        if options.grad_accum_no_sync:
            raise ValueError("--grad-accum-no-sync does not apply to --to deepspeed: "
                             "DeepSpeed already reduces the gradients only when the "
                             "optimizer steps")

    def transforms(self, stage: Stage) -> tuple[Transform, ...]:
        if stage == "prepared":  # before the precision is removed: it may be the user's
            return (Transform("deepspeed-user-config", self._user_config),)
        if stage == "engine":
            return (Transform("deepspeed", self._plan),)
        if stage == "late":
            return (Transform("deepspeed-zero3", deepspeed_zero3.plan_zero3,
                              lambda ctx: ctx.options.zero == 3),)
        return ()

    def precision_owner(self, options: ConvertOptions) -> str | None:
        return "DeepSpeed sets the precision from ds_config.json"

    def _user_config(self, ctx: Context) -> None:
        """The user's own DeepSpeed config, the base of the one written; the options left
        to it settled from it."""
        self.user = deepspeed_user.find(ctx)
        if self.user is not None:
            deepspeed_user.settle(ctx, self.user)

    def _plan(self, ctx: Context) -> None:
        if self.user is not None:
            plan_deepspeed(ctx, self.user)

    def wrapped_name(self, model_name: str) -> str:
        return f"{model_name}_engine"

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping | None:
        """The statement that makes the engine (`engine = deepspeed.initialize(...)[0]`)
        and where it goes: at the site, or after the optimizer when that is built later
        in the same block. None (and the conversion refused) when the optimizer is out of
        reach."""
        return _initialize(ctx, site)


def _initialize(ctx: Context, site: WrapSite) -> Wrapping | None:
    facts, flow, n = ctx.facts, ctx.flow, ctx.names
    model, home, target, name = site.model, site.home, site.wrapper, site.model_code
    anchor, after = site.anchor, site.after
    built = facts.statement(model.optimizer)
    small = built.body[0] if isinstance(built, cst.SimpleStatementLine) else None
    place = flow.place_of(small.targets[0].target) \
        if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
    reachable = sorted(p.code for p in flow.component(place) if p.scope is home.scope
                       and _plain(p.code, home)) if place is not None else []
    if not reachable or built is None or place is None:
        ctx.refuse(model.optimizer, "deepspeed.optimizer_out_of_reach",
                   f"the optimizer of `{name}` cannot be reached where its "
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
    attribute = target.removeprefix("self.")
    if attribute != target and attribute.isidentifier() and in_module_class(ctx, anchor):
        target = f'self.__dict__["{attribute}"]'  # not a submodule: the original's keys
    code = (f"{target} = deepspeed.initialize(model={name}, optimizer={optimizer}, "
            f'config={n.os}.environ["DS_CONFIG"])[0]\n')
    before = deepspeed_zero3.keep_plain_copy(ctx, model, name, anchor)
    return Wrapping(statement(code), anchor, after, tuple(before))


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


def plan_deepspeed(ctx: Context, user: deepspeed_user.UserConfig) -> None:
    _refuse_what_cannot_move(ctx)
    if ctx.refusal is not None:
        return
    model = ctx.models[0]
    clipping = deepspeed_settings.clipping(ctx)
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
    deepspeed_user.read_from_option(ctx, user)
    deepspeed_settings.write_config(ctx, model, user, clipping,
                                    deepspeed_settings.accumulation(ctx, steps), steps)


def engine_at(ctx: Context, site: cst.CSTNode) -> str | None:
    """The engine as code where `site` runs: what the model's training forward passes
    call in the same function, or `self.<engine>` in a method of the class that holds it."""
    facts = ctx.facts
    func = facts.function(site)
    for model in ctx.models:
        calls = model.wrapped.calls
        for call in model.forwards:
            if call in calls and facts.function(call) is func:
                return calls[call]
        for call in model.forwards:
            home = model.homes.get(call)
            code = calls.get(call, "")
            if home is not None and home.kind == "class" and func is not None and any(
                    a is home.scope for a in facts.ancestors(func)) and code.startswith("self."):
                return code
    return None


def _refuse_what_cannot_move(ctx: Context) -> None:
    facts = ctx.facts
    if one_model_one_optimizer(ctx, "DeepSpeed", "convert to DDP (--to ddp), or make one "
                               "engine per model with deepspeed.initialize yourself",
                               "DeepSpeed needs one") is None:
        return
    for call in facts.calls:
        name = facts.call_name(call) or ""
        if name.startswith("apex."):
            ctx.refuse(call, "deepspeed.apex",
                       "apex mixed precision cannot move into a DeepSpeed config "
                       "automatically", "convert with --to ddp first (it migrates apex), or "
                       "remove apex and set fp16/bf16 in ds_config.json")
        elif name in _AMP and ctx.options.amp == "keep":
            ctx.refuse(call, "deepspeed.amp_in_code",
                       "mixed precision written in code: under DeepSpeed it is set in "
                       "ds_config.json", "convert with --amp fp16, --amp bf16 or --amp none: "
                       "distrun removes autocast and the GradScaler and sets the config (or "
                       "set fp16 or bf16 in your own ds_config.json beside the script)")
        elif method_name(call) == "load_state_dict" and is_model_optimizer(ctx, call) \
                and ds_checkpoint.load_path(ctx, call) is None:
            ctx.refuse(call, "deepspeed.untraced_resume",
                       "the optimizer's state is loaded from a checkpoint distrun "
                       "cannot trace to its `torch.load(path)`: under ZeRO each rank holds a "
                       "shard of it, so this resume would be wrong", "load it with "
                       "`state = torch.load(path)` in the same function, or resume with "
                       "`engine.load_checkpoint(dir)` after `engine.save_checkpoint(dir)` "
                       "on every rank")
        elif name in _CLIP_OTHER:
            ctx.refuse(call, "deepspeed.clipping",
                       f"`{facts.code(call.func)}`: DeepSpeed clips only by the "
                       "gradients' global 2-norm", "use clip_grad_norm_ (it moves into "
                       "gradient_clipping), or --to ddp")


def _conditional(ctx: Context, step: cst.Call) -> bool:
    """Is `step` inside an `if` that holds no backward pass (it skips some batches)?"""
    facts = ctx.facts
    for node in facts.ancestors(step):
        if isinstance(node, (cst.FunctionDef, cst.For, cst.While)):
            return False
        if isinstance(node, cst.If) and not any(is_backward(c) for c in facts.calls_in(node)):
            return True
    return False


def _backward(ctx: Context, call: cst.Call, accumulating: bool) -> None:
    engine = engine_at(ctx, call)
    assert isinstance(call.func, cst.Attribute)
    loss = ctx.facts.code(call.func.value)
    if isinstance(call.func.value, cst.Call) and call.func.value.args:  # scaler.scale(loss)
        loss = ctx.facts.code(call.func.value.args[0].value)
    if engine is None:
        ctx.refuse(call, "deepspeed.engine_out_of_reach",
                   f"`{loss}.backward()` runs where no DeepSpeed engine can be reached",
                   "compute the loss and call backward where the model's forward pass runs")
        return

    # accumulating: the script scales its loss itself, as before
    backward_through(ctx, call, engine, ", scale_wrt_gas=False" if accumulating else "")
    ctx.plan.change(call, "deepspeed.backward",
                    f"`{ctx.facts.code(call)}` -> `{engine}.backward({loss})`: "
                    "the engine reduces the gradients into each rank's ZeRO shard")


def _step(ctx: Context, call: cst.Call) -> None:
    engine = engine_at(ctx, call)
    if engine is None:
        ctx.refuse(call, "deepspeed.engine_out_of_reach",
                   f"`{ctx.facts.code(call)}` runs where no DeepSpeed engine can be "
                   "reached", "step the optimizer where the model's forward pass runs")
        return
    ctx.plan.rewrite(call, lambda _n: expression(f"{engine}.step()"))
    ctx.plan.change(call, "deepspeed.step", f"`{ctx.facts.code(call)}` -> `{engine}.step()`: it "
                    "clips, steps the sharded optimizer, gathers the weights and zeroes the "
                    "gradients")


def _zero_grad(ctx: Context, call: cst.Call) -> None:
    """`optimizer.zero_grad()` would drop the gradient buffers ZeRO-Offload keeps on the
    optimizer's shard: the engine's zero_grad() clears the model's gradients instead."""
    engine = engine_at(ctx, call)
    parent = ctx.facts.parent.get(call)
    if engine is not None:
        ctx.plan.rewrite(call, lambda _n: expression(f"{engine}.zero_grad()"))
        ctx.plan.change(call, "deepspeed.zero_grad",
                        f"`{ctx.facts.code(call)}` -> `{engine}.zero_grad()` "
                        "(the optimizer's own would drop the buffers ZeRO keeps on its shard)")
    elif isinstance(parent, cst.Expr):
        ctx.plan.remove(parent)
        ctx.plan.change(call, "deepspeed.zero_grad",
                        f"`{ctx.facts.code(call)}` removed: the engine's "
                        "step() zeroes the gradients")
    else:
        ctx.refuse(call, "deepspeed.zero_grad",
                   f"`{ctx.facts.code(call)}` would drop the gradient buffers ZeRO keeps",
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
        ctx.plan.change(stmt, "deepspeed.local_rank_argument",
                        f"`{parser}` accepts --local_rank, which the "
                        "deepspeed launcher passes")


def _load(ctx: Context, call: cst.Call) -> None:
    engine, path = engine_at(ctx, call), ds_checkpoint.load_path(ctx, call)
    if engine is None or path is None:
        ctx.refuse(call, "deepspeed.engine_out_of_reach",
                   "the optimizer's state is loaded where no DeepSpeed engine can be "
                   "reached", "resume where the model is trained, with "
                   "`engine.load_checkpoint(dir)`")
        return
    ds_checkpoint.convert_load(ctx, call, engine, path)


