"""Plain torch DistributedDataParallel (`--to ddp`, the default).

    model = Net().to(device)          ->  model = Net().to(device)
    ...                                   ddp_model = DDP(model, device_ids=[LOCAL_RANK]
                                                          if torch.cuda.is_available() else None)

The training forward passes call `ddp_model`; everything else keeps the model itself
(see `transforms/model.py`). Everything else of the vocabulary is torch.distributed's
(`targets/base.py`). A model the script never moves to a device is moved in the wrap.
"""

from __future__ import annotations

from distrun.convert.build import statement
from distrun.convert.context import Context, Wrapping, WrapSite
from distrun.convert.options import Target as TargetName
from distrun.convert.targets.base import TorchDistributed


class DDP(TorchDistributed):
    name: TargetName = "ddp"

    def wrap(self, ctx: Context, site: WrapSite) -> Wrapping | None:
        n = ctx.names
        inner = site.model_code if site.moved else f"{site.model_code}.to({n.device})"
        ctx.need("ddp", at=site.anchor)
        return Wrapping(statement(
            f"{site.wrapper} = {n.ddp}({inner}, device_ids=[{n.local_rank}] "
            f"if torch.cuda.is_available() else None)\n"), site.anchor, site.after)
