"""Result records of a conversion: what changed, what was found, and the output text.

The core returns these; `distrun.cli.render` turns them into text or JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
Status = Literal["converted", "already-distributed", "nothing-to-do", "unsupported"]

# `ConvertResult.batch_note` when a loader now gives each process its own batches.
SHARDED_BATCH_NOTE = ("each process reads batch_size samples per step, so a step sees "
                      "batch_size x processes in all: scale the learning rate with it, or "
                      "divide batch_size by the number of processes to train as before")
# ... when a loader given a batch_sampler now splits each batch among the processes.
SPLIT_BATCH_NOTE = ("a loader given its own batch_sampler splits each of its batches among "
                    "the processes: a step sees the batch sampler's batch, as before (each "
                    "process reads 1/processes of it): keep its batch size")


@dataclass(frozen=True)
class Change:
    """One rewrite the converter applied, at a line of the ORIGINAL script."""

    line: int
    rule: str
    message: str


@dataclass(frozen=True)
class Finding:
    """Something the converter could not make safe by itself, and how to fix it."""

    line: int
    rule: str
    severity: Severity
    message: str
    fix: str = ""


@dataclass
class ConvertResult:
    """What `convert_source` returns. It never prints and never exits."""

    source: str
    output: str
    status: Status
    changes: list[Change] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # name -> text, beside the output
    # name -> the user's file (its absolute path) a file of `files` was merged from
    bases: dict[str, str] = field(default_factory=dict)
    batch_note: str | None = None  # what sharding the loaders does to the batch, if it does
    launcher: str = "torchrun"  # the `distrun launch --launcher` that runs the result

    @property
    def changed(self) -> bool:
        return self.output != self.source

    def sorted_entries(self) -> list[Change | Finding]:
        """Changes and findings together, in line order (changes first on a tie)."""
        entries: list[Change | Finding] = [*self.changes, *self.findings]
        return sorted(entries, key=lambda e: (e.line, isinstance(e, Finding)))

    def to_json(self, filename: str) -> dict[str, Any]:
        return {
            "file": filename,
            "status": self.status,
            "changed": self.changed,
            "changes": [asdict(c) for c in sorted(self.changes, key=lambda c: c.line)],
            "findings": [asdict(f) for f in sorted(self.findings, key=lambda f: f.line)],
        }
