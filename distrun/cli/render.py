"""Text, JSON and diff renderings of the core's result records. No logic, no I/O."""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrun.convert.report import ConvertResult, Finding


def report_text(result: ConvertResult, filename: str) -> str:
    lines = []
    for entry in result.sorted_entries():
        if hasattr(entry, "severity"):
            finding: Finding = entry  # type: ignore[assignment]
            text = f"{filename}:{entry.line}: {finding.severity}: {entry.message}"
            if finding.fix:
                text += f"\n    fix: {finding.fix}"
        else:
            text = f"{filename}:{entry.line}: {entry.rule}: {entry.message}"
        lines.append(text)
    return "\n".join(lines)


def report_json(result: ConvertResult, filename: str, written: str | None) -> str:
    data = result.to_json(filename)
    data["output"] = written
    return json.dumps(data, indent=2)


def summary(result: ConvertResult, filename: str, written: str | None) -> str:
    warnings = sum(1 for f in result.findings if f.severity != "info")
    if result.status == "already-distributed":
        return f"{filename}: already distributed, nothing to do"
    if result.status == "unsupported":
        return f"{filename}: not converted (see the warning above)"
    if not result.changed:
        return f"{filename}: nothing to convert"
    where = f" -> {written}" if written else ""
    return (f"{filename}{where}: {len(result.changes)} changes, {warnings} warnings")


def unified_diff(before: str, after: str, filename: str) -> str:
    return "".join(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{filename}", tofile=f"b/{filename}",
    ))
