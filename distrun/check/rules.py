"""The rules of `distrun launch` checks: their ids, what each means, how to fix it.

`always` rules run on every launch (they need nothing but the script's text and the
ranks' output); the others need `--check`, which runs the workers instrumented.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    always: bool  # also without --check
    means: str
    fix: str


RULES = {rule.id: rule for rule in (
    Rule("no-process-group", True,
         "the script never sets up torch.distributed but runs on several processes: each "
         "one trains the whole model on the whole data alone (N independent trainings)",
         "convert it: `distrun convert SCRIPT` (or call "
         "torch.distributed.init_process_group and wrap the model in "
         "DistributedDataParallel)"),
    Rule("options-after-script", True,
         "a distrun option comes after SCRIPT, so it goes to the script, not to distrun",
         "put distrun's options before SCRIPT: `distrun launch --nproc-per-node 2 "
         "train.py --epochs 3`"),
    Rule("duplicate-output", True,
         "the same lines are printed by several ranks",
         "print on rank 0 only (`if int(os.environ.get('RANK', 0)) == 0:`), or let "
         "`distrun convert` do it"),
    Rule("params-diverged", False,
         "the ranks' parameters differ after an optimizer step: gradients are not "
         "averaged, so each rank trains its own model",
         "run the training forward pass through the DistributedDataParallel model "
         "(`ddp_model(x)`, not the module inside it), and give DDP every parameter the "
         "optimizer updates"),
    Rule("unsharded-data", False,
         "every rank reads the same data: the training DataLoader is not split between "
         "the ranks",
         "give the loader `sampler=DistributedSampler(dataset)` (and call "
         "`sampler.set_epoch(epoch)` each epoch), or pass it to `accelerator.prepare`"),
    Rule("no-set-epoch", False,
         "a DistributedSampler(shuffle=True) gives every epoch the same order: its "
         "epoch never changes",
         "call `loader.sampler.set_epoch(epoch)` before iterating the loader each epoch"),
    Rule("shared-write", False,
         "several ranks write the same file: they overwrite each other (a checkpoint "
         "can end up torn)",
         "write on rank 0 only (`if dist.get_rank() == 0:`), or put the rank in the "
         "file name"),
)}

CHECKED = [rule.id for rule in RULES.values() if not rule.always]
ALWAYS = [rule.id for rule in RULES.values() if rule.always]


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str  # what was seen, with the ranks and the numbers
    where: str = ""  # file:line in the user's code, where it can be known

    @property
    def fix(self) -> str:
        return RULES[self.rule].fix

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "where": self.where, "message": self.message,
                "fix": self.fix}
