"""The sampler of a training loader whose passes the conversion cannot follow (part of
the data transform): `AutoEpochSampler`, a DistributedSampler that moves to the next epoch
after each pass; its `again` form for loaders made anew during the training."""

from __future__ import annotations

import libcst as cst

from distrun.convert.context import Context
from distrun.convert.names import Names


def auto_epoch_code(n: Names, again: bool = False) -> str:
    """The sampler that moves on after each pass; `again`: also for loaders made anew
    (each epoch, inline in `iter(...)`), which go on from the epoch the last sampler made
    at the same place reached (every rank makes them in the same order). A shuffling one
    takes one number of torch's generator per pass, as the RandomSampler it replaces does
    (its seed): the script's later draws (the next fold's initial weights) stay the
    original's."""
    if not again:
        return f'''

class {n.auto_epoch}({n.sampler}):
    """distrun: a DistributedSampler that moves to the next epoch after each pass."""

    def __iter__(self):
        if self.shuffle:  # one draw of torch's generator per pass, as RandomSampler's
            torch.empty((), dtype=torch.int64).random_()
        indices = super().__iter__()
        self.set_epoch(self.epoch + 1)
        return indices
'''
    return f'''

class {n.auto_epoch}({n.sampler}):
    """distrun: a DistributedSampler that moves to the next epoch after each pass; one made
    again at the same place (`again`) goes on from the epoch the last one reached."""
    reached = {{}}

    def __init__(self, *args, again=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.again = again
        self.set_epoch({n.auto_epoch}.reached.get(again, 0))

    def __iter__(self):
        if self.shuffle:  # one draw of torch's generator per pass, as RandomSampler's
            torch.empty((), dtype=torch.int64).random_()
        indices = super().__iter__()
        self.set_epoch(self.epoch + 1)
        {n.auto_epoch}.reached[self.again] = self.epoch
        return indices
'''


def define_auto_epoch(ctx: Context, at: cst.CSTNode, again: bool = False) -> None:
    """The sampler's class in the module of `at`: the form that takes `again` once any
    sampler of the module needs it."""
    defined = ctx.helpers.get(ctx.facts.module_of(at).name, {}).get("auto_epoch", "")
    ctx.need("torch", at=at)
    ctx.define_helper("auto_epoch", at, auto_epoch_code(ctx.names, again or "again=" in defined))
