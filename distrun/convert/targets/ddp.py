"""Plain torch DistributedDataParallel (`--to ddp`, the default).

    model = Net().to(device)          ->  model = Net().to(device)
    ...                                   ddp_model = DDP(model, device_ids=[LOCAL_RANK]
                                                          if torch.cuda.is_available() else None)

The training forward passes call `ddp_model`; everything else keeps the model itself
(see `transforms/model.py`). Everything else of the vocabulary is torch.distributed's
(`targets/base.py`). A model the script never moves to a device is moved in the wrap.

A wrapper made as an attribute of an nn.Module of the script (`self.ddp_network` in a
model that holds its own network) is put in the instance's `__dict__`: assigned plainly,
nn.Module would register it as a submodule, and `state_dict()` would hold every weight
twice (`ddp_network.module.*` beside `network.*`), a checkpoint the original cannot load.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted, keyword
from distrun.convert.build import append_keyword, expression, statement
from distrun.convert.context import Context, Wrapping, WrapSite
from distrun.convert.options import Target as TargetName
from distrun.convert.targets.base import TorchDistributed, in_module_class
from distrun.convert.unused_layers import DEAD, NEVER, unused_layers


class DDP(TorchDistributed):
    name: TargetName = "ddp"

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping | None:
        n = ctx.names
        inner = site.model_code if site.moved or ctx.on_cpu else \
            f"{site.model_code}.to({n.device})"
        ctx.need("ddp", at=site.anchor)
        unused = unused_layers(ctx, site.model)
        devices = "" if ctx.on_cpu else (f", device_ids=[{n.local_rank}] "
                                         "if torch.cuda.is_available() else None")
        made = (f"{n.ddp}({inner}{devices}"
                f"{', find_unused_parameters=True' if unused else ''})")
        for layer, line, how in unused:
            spare = ("freeze it (`.requires_grad_(False)`) to spare DDP that search"
                     if "no_grad" in how else "remove the layer to spare DDP that search"
                     if how in (NEVER, DEAD) else "DDP looks for such layers at every step")
            says = how if "gradient" in how else f"{how}: its parameters get no gradient" + (
                " at such a step" if "holds" in how else "")
            ctx.plan.change(line, "model.find_unused", f"`{layer}` {says}, so "
                            f"`{site.wrapper}` is made with find_unused_parameters=True (else "
                            f"DDP stops every rank at the next step); {spare}")
        if unused:
            _checkpoints_not_reentrant(ctx, site.wrapper)
        attribute = site.wrapper.removeprefix("self.")
        if attribute != site.wrapper and attribute.isidentifier() and in_module_class(
                ctx, site.anchor):
            return Wrapping(statement(
                f'self.__dict__["{attribute}"] = {made}  # not a submodule: the checkpoint '
                "keeps the original's keys\n"), site.anchor, site.after)
        return Wrapping(statement(f"{site.wrapper} = {made}\n"), site.anchor, site.after)


_CHECKPOINTS = frozenset({"torch.utils.checkpoint.checkpoint",
                          "torch.utils.checkpoint.checkpoint_sequential"})


def _checkpoints_not_reentrant(ctx: Context, wrapper: str) -> None:
    """Activation checkpointing in its reentrant form (`checkpoint(f, x)` without
    `use_reentrant=False`, torch's default until 2.4) runs a second backward inside the
    first: with find_unused_parameters=True, DDP marks a parameter ready twice and stops
    every rank at the first step ("Expected to mark a variable ready only once").
    `use_reentrant=False` computes the same gradients in one pass."""
    for call in ctx.facts.calls:
        given = keyword(call, "use_reentrant")
        if ctx.facts.call_name(call) not in _CHECKPOINTS or (
                given is not None and dotted(given.value) == "False"):
            continue
        ctx.plan.rewrite(call, _not_reentrant)
        ctx.plan.change(call, "model.checkpoint_reentrant", "activation checkpointing made "
                        f"`use_reentrant=False`: `{wrapper}` looks for unused parameters, "
                        "and the reentrant form's second backward would mark a parameter "
                        "ready twice (\"Expected to mark a variable ready only once\", every "
                        "rank stopped at the first step); the same gradients in one pass")


def _not_reentrant(node: cst.CSTNode) -> cst.CSTNode:
    if not isinstance(node, cst.Call):
        return node
    if keyword(node, "use_reentrant") is None:
        return append_keyword(node, "use_reentrant", expression("False"))
    return node.with_changes(args=[
        a.with_changes(value=expression("False")) if a.keyword is not None
        and a.keyword.value == "use_reentrant" else a for a in node.args])
