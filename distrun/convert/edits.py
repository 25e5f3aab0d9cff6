"""The edit plan: what transforms record, keyed by nodes of the original tree.

Transforms never modify the tree themselves. They look at `Facts` (the original tree)
and record here: replace a node (as a function of its already-updated version, so
edits nest), insert statements before or after a statement, wrap a run of sibling
statements in a compound statement, remove a simple statement. Each change and each
finding is recorded with its line. `apply.apply(plan)` then rewrites the tree once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from distrun.convert.analysis import Facts, ModuleInfo
from distrun.convert.build import Rewrite, constant
from distrun.convert.report import (
    SHARDED_BATCH_NOTE,
    SPLIT_BATCH_NOTE,
    Change,
    Finding,
    Severity,
)
from distrun.convert.rules import check

Wrapper = Callable[[list[cst.BaseStatement]], cst.BaseStatement]


@dataclass
class Report:
    """What the plan says about one file: its changes and findings, and what its sharded
    loaders do to the batch."""

    changes: list[Change] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    batch_note: str | None = None


@dataclass
class Plan:
    facts: Facts
    replace: dict[cst.CSTNode, list[Rewrite]] = field(default_factory=lambda: defaultdict(list))
    before: dict[cst.CSTNode, list[cst.BaseStatement]] = field(
        default_factory=lambda: defaultdict(list)
    )
    after: dict[cst.CSTNode, list[cst.BaseStatement]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # block -> [(first statement, last statement, builder of the compound that holds them)]
    wraps: dict[cst.CSTNode, list[tuple[cst.CSTNode, cst.CSTNode, Wrapper]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # statement -> [(expression, name, comment)]: `name = <expression>` computed before it
    hoists: dict[cst.CSTNode, list[tuple[cst.CSTNode, str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    reports: dict[str, Report] = field(default_factory=dict)  # by module name
    touched_top_level: list[cst.CSTNode] = field(default_factory=list)
    leads: set[int] = field(default_factory=set)  # statements whose leading lines move up

    # -- the report ----------------------------------------------------------------

    def change(self, node: cst.CSTNode, rule: str, message: str) -> None:
        self._report(node).changes.append(Change(self.facts.line(node), check(rule), message))

    def finding(
        self, node: cst.CSTNode | None, rule: str, message: str, fix: str = "",
        severity: Severity = "warning",
    ) -> None:
        """A finding at `node` (None: about the whole script, at line 1 of the entry)."""
        line = self.facts.line(node) if node is not None else 1
        self._report(node).findings.append(Finding(line, check(rule), severity, message, fix))

    def shards_batches(self, node: cst.CSTNode) -> None:
        """The loader changed at `node` now gives each process its own batches: the
        file's result says what that does to the batch (`ConvertResult.batch_note`)."""
        self._note(node, SHARDED_BATCH_NOTE)

    def splits_batches(self, node: cst.CSTNode) -> None:
        """The loader changed at `node` now splits each of its batches among the
        processes: the global batch stays the original's (said in the batch note)."""
        self._note(node, SPLIT_BATCH_NOTE)

    def _note(self, node: cst.CSTNode, note: str) -> None:
        report = self._report(node)
        notes = report.batch_note.split("; and ") if report.batch_note else []
        if note not in notes:  # the DistributedSampler's note first, the other after it
            notes = sorted([*notes, note], key=lambda n: n != SHARDED_BATCH_NOTE)
        report.batch_note = "; and ".join(notes)

    def report(self, info: ModuleInfo) -> Report:
        return self.reports.get(info.name, Report())

    def found(self, rule: str) -> bool:
        """Has a finding of `rule` been made, in any module?"""
        return any(f.rule == rule for r in self.reports.values() for f in r.findings)

    def _report(self, node: cst.CSTNode | None) -> Report:
        info = self.facts.module_of(node) if node is not None else self.facts.entry
        return self.reports.setdefault(info.name, Report())

    # -- the edits -----------------------------------------------------------------

    def rewrite(self, node: cst.CSTNode, fn: Rewrite) -> None:
        self.replace[node].append(fn)
        self._touch(node)

    def rewrite_first(self, node: cst.CSTNode, fn: Rewrite) -> None:
        """A rewrite of `node` that goes before those planned so far: it replaces the node
        itself, which rewrites planned around it by earlier transforms then take (a call
        replaced by a target, inside what the model transform wrapped around it)."""
        self.replace[node].insert(0, fn)
        self._touch(node)

    def hoist(self, expr: cst.CSTNode, stmt: cst.CSTNode, name: str, comment: str = "") -> None:
        """`name = <expr>` just before the statement `stmt` (which holds `expr`), and `expr`
        then read as `name`: the expression as every rule rewrites it (what
        `insert_before` inserts is fixed when planned), computed at the same point of the
        run, before whatever `stmt` becomes (a rank-0 guard: on every rank)."""
        self.hoists[stmt].append((expr, name, comment))
        self._touch(stmt)

    def insert_before(self, stmt: cst.CSTNode, new: Sequence[cst.BaseStatement],
                      lead: bool = False, first: bool = False) -> None:
        """Statements before `stmt`; with `lead`, the comments and blank lines above
        `stmt` go above them (they open a step of which `stmt` is part); with `first`,
        before what is already inserted there (a guard around what `stmt` does, also
        where part of it was moved above it)."""
        if lead and (first or not self.before.get(stmt)):
            self.leads.add(id(stmt))
        if first:
            self.before[stmt][0:0] = new
        else:
            self.before[stmt].extend(new)
        self._touch(stmt)

    def insert_after(self, stmt: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> None:
        self.after[stmt].extend(new)
        self._touch(stmt)

    def wrap(self, first: cst.CSTNode, last: cst.CSTNode, make: Wrapper) -> None:
        """Put the statements from `first` to `last` (siblings in one block, with whatever
        the plan inserts around them) inside the compound statement `make(statements)`."""
        block = self.facts.parent[first]
        self.wraps[block].append((first, last, make))
        self._touch(first)

    def remove(self, small: cst.CSTNode) -> None:
        """Remove one simple statement (`x = f()`): its whole line when it stands alone
        there, only itself on a line it shares (`x = f(); y = 2`), `pass` in a one-line
        suite."""
        line = self.facts.parent.get(small)
        alone = isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and len(
            line.body) == 1
        if alone and isinstance(line, cst.SimpleStatementLine):
            self.rewrite(line, constant(cst.RemoveFromParent()))
        elif alone:
            self.rewrite(small, constant(cst.Pass()))
        else:
            self.rewrite(small, constant(cst.RemoveFromParent()))

    def _touch(self, node: cst.CSTNode) -> None:
        self.touched_top_level.append(self.facts.top_level_statement(node))

    @property
    def has_edits(self) -> bool:
        return bool(self.replace or self.before or self.after or self.hoists)
