"""The ranks' facts compared: findings, as soon as the facts show them.

The probe in each worker appends facts to `rank<R>.jsonl` (probe.py). `Checker.poll()`
reads what is new in every file and returns the findings not given before; distrun calls
it while the job runs, so a wrong script is named in its first steps, and once more at
the end. Only the ranks of this node are compared (their files are here); no collective
is ever run for the check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distrun.check.data_sets import Key, LoaderFacts, contents_differ
from distrun.check.rules import Finding

MAX_WRITES = 5  # shared files named one by one; more are counted


@dataclass
class RankFacts:
    rank: int
    world: int
    group: bool = False
    params: dict[tuple[int, int], tuple[bool, dict[str, str]]] = field(default_factory=dict)
    loaders: dict[Key, LoaderFacts] = field(default_factory=dict)
    train: set[Key] = field(default_factory=set)
    epochs: dict[Key, list[tuple[int | None, bool]]] = field(default_factory=dict)
    writes: dict[str, str] = field(default_factory=dict)  # path -> file:line
    backward: bool = False  # a backward pass ran (training without an optimizer too)
    hand: bool = False  # parameters updated by hand: steps between backward passes
    steps: int = 0  # of the first optimizer, when the rank ended
    all_steps: int = 0  # of every optimizer, when the rank ended
    window: int | None = None  # the default check's window ended after this many steps
    saves: list[tuple[str, str, str]] = field(default_factory=list)  # sharded saves
    sharded: int = 0  # parameters left out of the comparison (ZeRO-3 shards)
    ended: bool = False

    def add(self, fact: dict[str, Any]) -> None:
        kind = fact["kind"]
        key = (str(fact.get("site")), int(fact.get("number", 0)))
        if kind == "group":
            self.group = True
        elif kind == "params":
            self.params[(int(fact["optimizer"]), int(fact["step"]))] = (
                bool(fact["group"]), {str(k): str(v) for k, v in fact["values"].items()})
            self.sharded = max(self.sharded, int(fact.get("sharded", 0)))
        elif kind == "loader":
            self.loaders[key] = LoaderFacts(
                str(fact["first"]), _int(fact.get("batch")), _int(fact.get("length")),
                _int(fact.get("dataset")), str(fact.get("sampler")),
                bool(fact.get("replacement")),
                fact["split"] if isinstance(fact.get("split"), dict) else None,
                str(fact["content"]) if fact.get("content") else None)
        elif kind == "train":
            self.train.add(key)
        elif kind == "epoch":
            self.epochs.setdefault(key, []).append((_int(fact["epoch"]), bool(fact["shuffle"])))
        elif kind == "write":
            self.writes.setdefault(str(fact["path"]), str(fact["site"]))
        elif kind == "backward":
            self.backward, self.hand = True, self.hand or bool(fact.get("hand"))
        elif kind == "sharded-save":
            self.saves.append((str(fact.get("site")), str(fact.get("what")),
                               str(fact.get("name", ""))))
        elif kind == "window":
            self.window = _int(fact.get("steps"))
        elif kind == "end":
            steps = fact.get("steps", {})
            self.steps = int(steps.get("0", 0))
            self.all_steps = sum(int(v) for v in steps.values())
            self.group = self.group or bool(fact.get("group"))
            self.ended = True

    @property
    def without_group(self) -> bool:
        """Took an optimizer step and never had a process group."""
        if self.group:
            return False
        stepped = [group for (_, step), (group, _) in self.params.items() if step == 1]
        return bool(stepped) and not any(stepped)

    @property
    def decided(self) -> bool:
        """Whether this rank has shown if it trains in a process group: it set one up,
        took its first optimizer step or ended. Until then a rank's "train" fact may be
        read before the step-1 parameters written right after it."""
        return self.group or self.ended or any(step == 1 for _, step in self.params)


class Checker:
    """Reads the facts files of `nproc` local ranks in `folder`; `poll()` gives the
    findings not given before."""

    def __init__(self, folder: Path, nproc: int) -> None:
        self.folder = folder
        self.nproc = nproc
        self.ranks: dict[int, RankFacts] = {}
        self.offsets: dict[Path, int] = {}
        self.given: set[object] = set()
        self.findings: list[Finding] = []

    # -- reading ----------------------------------------------------------------------

    def _read(self) -> None:
        for path in sorted(self.folder.glob("rank*.jsonl")):
            offset = self.offsets.get(path, 0)
            try:
                with path.open("rb") as stream:
                    stream.seek(offset)
                    data = stream.read()
            except OSError:
                continue
            complete = data[:data.rfind(b"\n") + 1]
            self.offsets[path] = offset + len(complete)
            rank = int(path.stem.removeprefix("rank"))
            for line in complete.splitlines():
                try:
                    fact = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(fact, dict):
                    continue
                if fact.get("kind") == "start":
                    self.ranks[rank] = RankFacts(rank, int(fact.get("world", 1)))
                elif rank in self.ranks:
                    self.ranks[rank].add(fact)

    @property
    def steps(self) -> int:
        """Optimizer steps of the first optimizer, the most any rank took."""
        return max([0, *(facts.steps for facts in self.ranks.values()),
                    *(step for facts in self.ranks.values() for (opt, step) in facts.params
                      if opt == 0)])

    @property
    def hand(self) -> bool:
        """Steps of parameters updated by hand (no optimizer), counted on some rank."""
        return any(facts.hand for facts in self.ranks.values())

    @property
    def sharded(self) -> int:
        """Parameters no rank could compare: ZeRO-3 held them as shards at every step."""
        return max([0, *(facts.sharded for facts in self.ranks.values())])

    # -- judging ----------------------------------------------------------------------

    def poll(self) -> list[Finding]:
        """Read what is new; the findings it shows that were not given before."""
        self._read()
        ranks = [self.ranks[r] for r in sorted(self.ranks)]
        new: list[Finding] = []
        for key, finding in self._saves(ranks):  # one rank shows these alone
            self._give(new, key, finding)
        if len(ranks) < 2 or ranks[0].world < 2:
            return new
        if self.nproc <= len(ranks) and all(r.without_group for r in ranks):
            self._give(new, "group", Finding(
                "no-process-group", f"none of the {len(ranks)} ranks set up a process group "
                "(torch.distributed.init_process_group was never called) before training"))
        if "group" in self.given:  # its consequences are not findings of their own
            return new
        if not all(r.decided for r in ranks):  # may yet turn out to be a missing group
            return new
        for key, finding in [*self._params(ranks), *self._data(ranks), *self._epochs(ranks),
                             *self._splits(ranks), *self._collectives(ranks),
                             *self._writes(ranks)]:
            self._give(new, key, finding)
        return new

    def _give(self, new: list[Finding], key: object, finding: Finding) -> None:
        if key not in self.given:
            self.given.add(key)
            new.append(finding)
            self.findings.append(finding)

    def _params(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """The first step after which a parameter differs between ranks."""
        common = set.intersection(*(set(r.params) for r in ranks))
        for optimizer, step in sorted(common, key=lambda k: (k[1], k[0])):
            tables = [r.params[(optimizer, step)][1] for r in ranks]
            differ = [name for name in tables[0]
                      if len({str(t.get(name)) for t in tables}) > 1]
            if not differ:
                continue
            name = differ[0]
            odd = [r.rank for r, t in zip(ranks, tables, strict=True)
                   if t.get(name) != tables[0].get(name)]
            which = f"optimizer step {step} of optimizer {optimizer + 1}" if optimizer else (
                f"step {step} (parameters updated by hand)" if ranks[0].hand
                else f"optimizer step {step}")
            return [("params", Finding(
                "params-diverged",
                f"after {which}, `{name}` differs between rank "
                f"{ranks[0].rank} and rank{'s' if len(odd) > 1 else ''} "
                f"{', '.join(map(str, odd))} ({len(differ)} of {len(tables[0])} parameters "
                "differ)"))]
        return []

    def _data(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """Training loaders whose first batch is the same on every rank, or that give a
        rank the whole data set."""
        found: list[tuple[object, Finding]] = []
        trained = set().union(*(r.train for r in ranks))
        for key in sorted(trained):
            facts = [r.loaders[key] for r in ranks if key in r.loaders]
            if len(facts) < len(ranks):
                continue
            if _split_by_rank(facts):  # each rank reads its own part, picked by hand
                continue
            whole = [f for f in facts if _reads_everything(f, ranks[0].world)]
            if len({f.first for f in facts}) == 1:
                seen = "gives every rank the same first batch"
            elif whole:
                f = whole[0]
                seen = (f"gives each rank all {f.dataset} samples ({f.length} batches "
                        f"of {f.batch} per epoch)")
            else:
                continue
            found.append((("data", key), Finding(
                "unsharded-data", f"the training DataLoader made here {seen}", key[0])))
        return found

    def _epochs(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """Training loaders iterated twice at the same shuffling epoch."""
        found: list[tuple[object, Finding]] = []
        for rank in ranks:
            for key, epochs in rank.epochs.items():
                shuffled = [epoch for epoch, shuffle in epochs if shuffle and epoch is not None]
                repeated = {e for e in shuffled if shuffled.count(e) > 1}
                if repeated:
                    found.append((("epoch", key), Finding(
                        "no-set-epoch",
                        f"the training DataLoader made here was iterated {len(shuffled)} "
                        f"times with its DistributedSampler at epoch {min(repeated)} (rank "
                        f"{rank.rank}): every epoch has the same order", key[0])))
        return found

    def no_training(self) -> Finding | None:
        """At the end of a job: no optimizer step on any rank whose probe reported."""
        self._read()
        ranks = list(self.ranks.values())
        if not ranks or not all(r.ended for r in ranks) or any(
                r.all_steps or r.params or r.window or r.backward for r in ranks):
            return None
        return Finding("no-training", f"none of the {len(ranks)} ranks checked took an "
                       "optimizer step before it ended")

    @property
    def window(self) -> int | None:
        """The steps the default check watched, once its window has ended on a rank."""
        ends = [r.window for r in self.ranks.values() if r.window is not None]
        return max(ends) if ends else None

    def _saves(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """torch.save of a rank's shard of the model (each save line once)."""
        found: list[tuple[object, Finding]] = []
        for rank in ranks:
            for site, what, name in rank.saves:
                held = ("FSDP2/DTensor shards" if what == "dtensor" else
                        "ZeRO-3 partitioned parameters (empty tensors in a state dict)")
                entry = f" (`{name}`)" if name else ""
                found.append((("save", site), Finding(
                    "sharded-checkpoint", f"rank {rank.rank} saved {held}{entry}: the file "
                    "holds this rank's part of the model, not the model", site)))
        return found

    def _splits(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """Loaders made at the same line that pick different, overlapping index lists on
        different ranks (index lists that do not overlap are a split by rank: fine)."""
        found: list[tuple[object, Finding]] = []
        keys = set.intersection(*(set(r.loaders) for r in ranks))
        for key in sorted(keys):
            splits = [r.loaders[key].split for r in ranks]
            if any(s is None for s in splits) or len({str(s["hash"]) for s in splits
                                                       if s is not None}) < 2:
                continue
            first = splits[0]
            assert first is not None
            for rank, split in zip(ranks[1:], splits[1:], strict=True):
                assert split is not None
                if split["hash"] == first["hash"]:
                    continue
                shared = set(first["sketch"]) & set(split["sketch"])
                if not shared:
                    continue
                sizes = "/".join(str(n) for n in first["lengths"])
                found.append((("split", key), Finding(
                    "split-differs", f"the DataLoader made here reads different, overlapping "
                    f"samples on rank {ranks[0].rank} and rank {rank.rank} (index lists of "
                    f"{sizes} drawn differently: a split without a seed)", key[0])))
                break
        reported = {key for key in keys if ("split", key) in {k for k, _ in found}}
        found += contents_differ(ranks, keys - reported)
        return found

    def _collectives(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """Ranks waiting at the same sequence number in different collectives (or shapes):
        read from the probe's `coll<RANK>` records (point-to-point send/recv aside)."""
        from distrun.check.waits import _collective

        inside = []
        for rank in ranks:
            record = _collective(self.folder / f"coll{rank.rank}")
            if record is not None and record.get("state") == "in" and record.get("op") not in (
                    "send", "recv"):
                inside.append((rank.rank, record))
        for (a, ra), (b, rb) in zip(inside, inside[1:], strict=False):
            if ra.get("seq") == rb.get("seq") and (ra.get("op"), ra.get("shape")) != (
                    rb.get("op"), rb.get("shape")):
                what = tuple(f"{r['op']}" + (f" {r['shape']}" if r.get("shape") is not None
                                              else "") for r in (ra, rb))
                return [(("collective", ra.get("seq")), Finding(
                    "collective-mismatch", f"at collective #{ra['seq']} rank {a} waits in "
                    f"{what[0]} ({ra.get('site')}) and rank {b} in {what[1]} "
                    f"({rb.get('site')})", str(ra.get("site", ""))))]
        return []

    def _writes(self, ranks: list[RankFacts]) -> list[tuple[object, Finding]]:
        """Files written by more than one rank."""
        writers: dict[str, list[RankFacts]] = {}
        for rank in ranks:
            for path in rank.writes:
                writers.setdefault(path, []).append(rank)
        shared = sorted(path for path, who in writers.items() if len(who) > 1)
        found: list[tuple[object, Finding]] = []
        for number, path in enumerate(shared[:MAX_WRITES], 1):
            who = writers[path]
            more = (f" ({len(shared) - MAX_WRITES} more files too)"
                    if number == MAX_WRITES and len(shared) > MAX_WRITES else "")
            found.append((("write", path), Finding(
                "shared-write", f"{path} is written by ranks "
                f"{', '.join(str(r.rank) for r in who)}{more}", who[0].writes[path])))
        return found


def _split_by_rank(facts: list[LoaderFacts]) -> bool:
    """The ranks' loaders read Subsets (or sampler index lists) that differ and do not
    overlap: the data was divided between the ranks by hand."""
    splits = [f.split for f in facts]
    if any(s is None for s in splits) or len({str(s["hash"]) for s in splits
                                               if s is not None}) < len(splits):
        return False
    seen: set[int] = set()
    for split in splits:
        assert split is not None
        sketch = set(split["sketch"])
        if sketch & seen:
            return False
        seen |= sketch
    return True


def _reads_everything(fact: LoaderFacts, world: int) -> bool:
    """A loader over a plain sequential or random (no replacement) sampler whose epoch
    covers the whole data set on this rank."""
    if fact.sampler not in ("SequentialSampler", "RandomSampler") or fact.replacement:
        return False
    if fact.length is None or fact.batch is None or fact.dataset is None:
        return False
    return fact.dataset >= world and fact.length * fact.batch >= fact.dataset


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# What libraries print on every rank by design: DeepSpeed's logger ("[2026-11-23
# 05:56:58,470] [WARNING] [engine.py:2304:...]") and its op loader. Not the script's.
_LIBRARY = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\] \[[A-Z]+\] \[[\w./-]+:\d+:"
                      r"|^DeepSpeed .* built successfully$|^Using \S+ as PyTorch extensions root"
                      r"|^Loading extension module |^Time to load \S+ op: ")


def duplicate_output(lines: dict[str, tuple[str, set[int]]], nproc: int) -> Finding | None:
    """Lines of standard output printed by more than one local rank (decimal numbers
    aside: each rank's loss differs; library log lines aside)."""
    repeated = [(text, ranks) for text, ranks in lines.values()
                if len(ranks) > 1 and not _LIBRARY.search(text)]
    if nproc < 2 or not repeated:
        return None
    text, ranks = repeated[0]
    every = sum(1 for _, r in repeated if len(r) == nproc)
    return Finding("duplicate-output", f"{len(repeated)} line(s) printed by several ranks "
                   f"({every} by all {nproc}), e.g. {text[:80]!r} by ranks "
                   f"{', '.join(map(str, sorted(ranks)))}")
