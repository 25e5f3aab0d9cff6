"""The rules of `distrun launch` checks: their ids, what each means, how to fix it.

`always` rules run on every launch, `--no-check` included (they need nothing but the
script's text and the ranks' output); the others need the workers instrumented: by
default for the job's first optimizer steps (the window), with `--check` to the end.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    always: bool  # also with --no-check
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
         "print on rank 0 only (`if int(os.environ.get('RANK', 0)) == 0:` around the "
         "print)"),
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
    Rule("spawn-under-launcher", True,
         "the script starts its own processes (mp.spawn, start_processes) in processes "
         "the launcher already started: each launched process spawns a group of its own "
         "(groups that never meet), or none at all when the count is "
         "torch.cuda.device_count() on a machine without GPUs",
         "let the launcher start the processes: `distrun convert SCRIPT` turns the spawned "
         "function into the launcher's form (rank and world size from the environment); "
         "or run the script alone with `python SCRIPT`"),
    Rule("no-training", False,
         "no rank took an optimizer step or ran a backward pass: the job trained nothing "
         "(a script whose "
         "processes spawn none, a loop that never runs, a training guarded by the wrong "
         "condition)",
         "make the launched processes train: a script that starts its own processes "
         "(mp.spawn) must leave that to the launcher (`distrun convert SCRIPT`); for a job "
         "that does not train (evaluation, inference) pass --no-check"),
    Rule("split-differs", False,
         "the ranks pick different samples for the same data (a split or an index list "
         "drawn without a seed): one rank's validation samples are another rank's "
         "training samples, and the ranks do not train on one shared training set",
         "draw the split alike on every rank: `random_split(ds, sizes, "
         "generator=torch.Generator().manual_seed(0))`, `np.random.RandomState(0)"
         ".permutation(n)`, `random_state=0` for pandas and scikit-learn (or `distrun "
         "convert` the single-process script, which has every rank take rank 0's draw)"),
    Rule("sharded-checkpoint", False,
         "torch.save of a model state that holds only this rank's shard (FSDP2 DTensors, "
         "ZeRO-3 partitioned parameters, whose state-dict entries are empty): the file "
         "does not load into the model outside this job",
         "save the full state: FSDP2: `get_model_state_dict(model, options="
         "StateDictOptions(full_state_dict=True, cpu_offload=True))` from "
         "torch.distributed.checkpoint.state_dict, on every rank, saved on rank 0; "
         "ZeRO-3: `engine.save_16bit_model(folder)` on every rank, or `model.state_dict()` "
         "inside `deepspeed.zero.GatheredParameters(list(model.parameters()))`"),
    Rule("collective-mismatch", False,
         "two ranks wait in different collectives (or in one with different tensor shapes) "
         "at the same point of their sequence of collectives: the job hangs (or exchanges "
         "wrong data) there",
         "make every rank call the same collectives in the same order with the same shapes: "
         "a collective inside `if rank == 0:` (an evaluation that all-reduces) must run on "
         "every rank, and every rank needs the same number of batches"),
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
    advice: str = ""  # the fix for this case (the user's own command), else the rule's

    @property
    def fix(self) -> str:
        return self.advice or RULES[self.rule].fix

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "where": self.where, "message": self.message,
                "fix": self.fix}


BEGIN = "<!-- check rules: made by `python -m distrun.check.rules`, do not edit -->"
END = "<!-- end of check rules -->"


def markdown() -> str:
    """The rule table of README.md and docs/check.md, between BEGIN and END."""
    rows = ["| rule | checked | what it means | fix |", "|---|---|---|---|"]
    for rule in RULES.values():
        when = ("every launch, `--no-check` too (the script's text, the ranks' output)"
                if rule.always else "the first 8 optimizer steps of every launch of 2 or "
                "more processes; to the end with `--check`")
        fix = rule.fix.replace("|", "\\|")
        rows.append(f"| `[{rule.id}]` | {when} | {rule.means.replace('|', '/')} | {fix} |")
    return "\n".join([BEGIN, *rows, END])


if __name__ == "__main__":
    print(markdown())
