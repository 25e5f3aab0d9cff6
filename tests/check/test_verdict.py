"""The comparison of the ranks' facts (verdict.py), on facts files written as the probe
writes them: the cases the broken-script corpus does not reach (no processes here)."""

from __future__ import annotations

import json
from pathlib import Path

from distrun.check.verdict import Checker, duplicate_output

SITE = "/job/train.py:12"


def write(folder: Path, rank: int, *facts: dict[str, object], partial: str = "") -> None:
    with (folder / f"rank{rank}.jsonl").open("a") as out:
        for fact in facts:
            out.write(json.dumps(fact) + "\n")
        out.write(partial)


def start(rank: int, world: int = 2) -> dict[str, object]:
    return {"kind": "start", "rank": rank, "local_rank": rank, "world": world}


def loader(first: str, sampler: str = "RandomSampler", replacement: bool = False,
           length: int = 2, batch: int = 32, dataset: int = 64) -> dict[str, object]:
    return {"kind": "loader", "site": SITE, "number": 0, "first": first, "batch": batch,
            "length": length, "dataset": dataset, "sampler": sampler,
            "replacement": replacement, "samples": None}


TRAIN = {"kind": "train", "site": SITE, "number": 0}
GROUP = {"kind": "group", "backend": "gloo"}


def rules(checker: Checker) -> list[str]:
    return [f.rule for f in checker.poll()]


def test_a_loader_that_feeds_no_step_is_not_training_data(tmp_path: Path) -> None:
    for rank in (0, 1):  # an evaluation loader: whole on every rank, on purpose
        write(tmp_path, rank, start(rank), GROUP, loader("same"))
    checker = Checker(tmp_path, 2)
    assert rules(checker) == []
    for rank in (0, 1):
        write(tmp_path, rank, TRAIN)
    assert rules(checker) == ["unsharded-data"]
    assert rules(checker) == []  # said once


def test_whole_data_set_per_rank_is_found_unless_drawn_with_replacement(tmp_path: Path) -> None:
    for rank, first in ((0, "a"), (1, "b")):  # seeded differently: other first batches
        write(tmp_path / "", rank, start(rank), GROUP, loader(first), TRAIN)
    assert rules(Checker(tmp_path, 2)) == ["unsharded-data"]
    drawn = tmp_path / "drawn"
    drawn.mkdir()
    for rank, first in ((0, "a"), (1, "b")):
        write(drawn, rank, start(rank), GROUP, loader(first, replacement=True, length=1000),
              TRAIN)
    assert rules(Checker(drawn, 2)) == []
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for rank, first in ((0, "a"), (1, "b")):
        write(sharded, rank, start(rank), GROUP, loader(first, "DistributedSampler", length=1),
              TRAIN)
    assert rules(Checker(sharded, 2)) == []


def test_same_epoch_twice_matters_only_when_shuffling(tmp_path: Path) -> None:
    epoch = {"kind": "epoch", "site": SITE, "number": 0, "epoch": 0, "shuffle": False}
    for rank in (0, 1):
        write(tmp_path, rank, start(rank), GROUP, epoch, epoch)
    checker = Checker(tmp_path, 2)
    assert rules(checker) == []
    write(tmp_path, 1, {**epoch, "shuffle": True}, {**epoch, "shuffle": True})
    assert rules(checker) == ["no-set-epoch"]


def test_a_line_being_written_is_read_once_complete(tmp_path: Path) -> None:
    params = {"kind": "params", "optimizer": 0, "step": 1, "group": True,
              "values": {"fc.weight": "x", "fc.bias": "y"}}
    write(tmp_path, 0, start(0), params)
    text = json.dumps({**params, "values": {"fc.weight": "x", "fc.bias": "z"}}) + "\n"
    write(tmp_path, 1, start(1), partial=text[:20])
    checker = Checker(tmp_path, 2)
    assert rules(checker) == []
    write(tmp_path, 1, partial=text[20:])
    found = checker.poll()
    assert [f.rule for f in found] == ["params-diverged"]
    assert "`fc.bias` differs between rank 0 and rank 1 (1 of 2 parameters differ)" in (
        found[0].message)


def test_one_process_or_no_group_at_all(tmp_path: Path) -> None:
    stepped = {"kind": "params", "optimizer": 0, "step": 1, "group": False, "values": {}}
    write(tmp_path, 0, start(0, world=1), stepped)
    assert rules(Checker(tmp_path, 1)) == []  # a world of one: nothing to compare
    two = tmp_path / "two"
    two.mkdir()
    for rank in (0, 1):
        write(two, rank, start(rank), stepped, {"kind": "write", "path": "/job/m.pt",
                                                "site": SITE})
    assert rules(Checker(two, 2)) == ["no-process-group"]  # shared-write is its consequence


def test_consequences_wait_until_every_rank_shows_whether_it_has_a_group(
        tmp_path: Path) -> None:
    """A rank writes "train" just before its step-1 parameters: a poll between the two
    must not report the unsharded data of a script that has no process group at all."""
    for rank in (0, 1):
        write(tmp_path, rank, start(rank), loader("same"), TRAIN)
    checker = Checker(tmp_path, 2)
    assert rules(checker) == []
    stepped = {"kind": "params", "optimizer": 0, "step": 1, "group": False, "values": {}}
    write(tmp_path, 0, stepped)
    assert rules(checker) == []  # rank 1 has not shown yet
    write(tmp_path, 1, stepped)
    assert rules(checker) == ["no-process-group"]
    assert rules(checker) == []


def test_duplicate_output_counts_lines_of_several_ranks() -> None:
    printed = {"epoch # loss #": ("epoch 1 loss 0.53", {0, 1}), "rank 0 ready": ("", {0}),
               "rank 1 ready": ("", {1})}
    found = duplicate_output(printed, 2)
    assert found is not None and found.message.startswith(
        "1 line(s) printed by several ranks (1 by all 2), e.g. 'epoch 1 loss 0.53'")
    assert duplicate_output({"a": ("a", {0})}, 2) is None
