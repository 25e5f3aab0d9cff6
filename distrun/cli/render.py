"""Text, JSON and diff renderings of the core's result records. No logic, no I/O. A
launch's report is render_launch.py's (`launch_report`, `done_line`, re-exported here)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from distrun.cli.render_launch import counted
from distrun.cli.render_launch import done_line as done_line  # re-exported
from distrun.cli.render_launch import launch_report as launch_report  # re-exported
from distrun.cli.term import paint
from distrun.convert.rules import RULES

if TYPE_CHECKING:
    from pathlib import Path

    from distrun.check import rules
    from distrun.check.session import Session
    from distrun.convert.project import ProjectResult
    from distrun.convert.report import ConvertResult, Finding
    from distrun.doctor import CheckResult
    from distrun.launch.runner import RunResult
    from distrun.launch.spec import Command


def report_text(result: ConvertResult, filename: str,
                cells: Mapping[int, tuple[int, int]] | None = None) -> str:
    """`FILE:LINE: rule: message` per change, `FILE:LINE: severity: message [rule]` per
    finding, the rule being its registered id (`convert/rules.py`); a notebook's lines
    are `FILE:cell C:LINE` (`cells` maps the lines of its code-cell script to cells)."""
    lines = []
    for entry in result.sorted_entries():
        where = f"{filename}:{entry.line}"
        if cells is not None:
            cell, line = cells.get(entry.line, (0, 0))
            where = f"{filename}:cell {cell}:{line}" if cell else filename
        if hasattr(entry, "severity"):
            finding: Finding = entry  # type: ignore[assignment]
            text = f"{where}: {finding.severity}: {entry.message} [{entry.rule}]"
            if finding.fix:
                text += f"\n    fix: {finding.fix}"
        else:
            text = f"{where}: {entry.rule}: {entry.message}"
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
    if result.status == "unsupported" and any(RULES[f.rule].blocks and f.severity == "error"
                                              for f in result.findings):
        return (f"{filename}: not converted, nothing written: it would train wrong where the "
                "errors above say (fix them, or convert with --partial to write the rest)")
    if result.status == "unsupported":
        return f"{filename}: not converted, nothing written (the reason is above)"
    if not result.changed:
        return f"{filename}: nothing to convert"
    where = f" -> {written}" if written else ""
    counts = f"{counted(len(result.changes), 'change')}, {counted(warnings, 'warning')}"
    unresolved = sum(1 for f in result.findings if RULES[f.rule].blocks
                     and f.severity == "error")
    if unresolved:
        counts = f"PARTIAL ({counted(unresolved, 'error')} unresolved), " + counts
    return f"{filename}{where}: {counts}"


def next_steps(result: ConvertResult, written: str, gpus: int) -> list[str]:
    """After a conversion: the command that launches the new script, and, when each rank
    now reads its share of the data, what that does to the batch (one line each)."""
    import shlex

    launcher = [] if result.launcher == "torchrun" else ["--launcher", result.launcher]
    on_cpu = any(f.rule == "device.cpu_script" for f in result.findings)
    nproc = "gpu" if gpus and not on_cpu else "2"
    where = (f"one process per GPU ({gpus} here)" if gpus and not on_cpu else
             "2 processes on the CPU, where the script trains" if on_cpu else
             "2 processes on this CPU")
    partial = any(RULES[f.rule].blocks and f.severity == "error" for f in result.findings)
    check = ["--check"] if partial else []  # what is unresolved shows in its first steps
    command = shlex.join(["distrun", "launch", *check, "--nproc-per-node", nproc, *launcher,
                          written])
    if partial:
        where += "; --check: what is left unresolved above may show in its first steps"
    lines = [f"next: {command}   # {where}"]
    if result.batch_note:
        lines.append(f"batch: {result.batch_note}")
    return lines


def project_report_text(result: ProjectResult, shown: Path) -> str:
    """Every file's changes and findings, `path:line: ...`, the entry first."""
    parts = [report_text(f.result, str(shown / f.source.rel), cells=f.source.cells)
             for f in result.files]
    return "\n".join(p for p in parts if p)


def project_summary(result: ProjectResult, shown: Path, written: str | None) -> str:
    entry = result.entry
    name = str(shown / entry.source.rel)
    if entry.result.status != "converted":
        return summary(entry.result, name, None)
    changes = sum(len(f.result.changes) for f in result.files)
    warnings = sum(1 for f in result.files for x in f.result.findings if x.severity != "info")
    changed = ", ".join(f.source.rel for f in result.changed)
    where = f" -> {written}" if written else ""
    return (f"{name}{where}: {len(result.files)} files read, {len(result.changed)} changed "
            f"({changed}), {counted(changes, 'change')}, {counted(warnings, 'warning')}")


def left_out_lines(left_out: list[tuple[str, int]], root: Path, written: str | None
                   ) -> list[str]:
    """What the copy left out (data sets, large files) and how to reach it from there."""
    lines = []
    for rel, size in left_out:
        lines.append(f"{written}: not copied: {rel} ({size / (1 << 20):.0f} MiB, no Python "
                     f"code): link it if the converted project reads it there: "
                     f"ln -s {root / rel} {written}/{rel}")
    return lines


def project_json(result: ProjectResult, shown: Path, written: str | None,
                 left_out: list[tuple[str, int]]) -> str:
    return json.dumps({
        "entry": str(shown / result.entry.source.rel),
        "status": result.entry.result.status,
        "changed": bool(result.changed),
        "output": written,
        "not_copied": [{"path": rel, "bytes": size} for rel, size in left_out],
        "files": [f.result.to_json(str(shown / f.source.rel)) for f in result.files],
    }, indent=2)


def project_diff(result: ProjectResult, shown: Path) -> str:
    return "".join(unified_diff(f.result.source, f.result.output, str(shown / f.source.rel)
                                + (" (code cells)" if f.source.cells is not None else ""))
                   for f in result.changed)


def unified_diff(before: str, after: str, filename: str) -> str:
    return "".join(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{filename}", tofile=f"b/{filename}",
    ))


def dry_run(command: Command) -> str:
    import shlex

    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(command.env.items()))
    return f"env {env} \\\n  {shlex.join(command.argv)}"


def finding(found: rules.Finding, warning: bool = False, fix: bool = False) -> str:
    """One finding of the launch checks: `distrun: check: [rule] where: what`."""
    head = "distrun: warning:" if warning else "distrun: check:"
    where = f"{found.where}: " if found.where else ""
    lines = [f"{head} [{found.rule}] {where}{found.message}"]
    if warning or fix:
        lines.append(f"  fix: {found.fix}")
    return "\n".join(lines)


def check_report(session: Session, found_at_end: list[rules.Finding], job_ok: bool) -> str:
    """The checks' end: under --check, every finding with its fix, or the all-clear;
    otherwise the findings only the end showed (repeated output), as warnings."""
    if not session.instrumented:
        return "\n".join(finding(f, warning=True) for f in found_at_end)
    window = session.window
    step = "step" if session.hand_steps else "optimizer step"
    steps = (f"the first {counted(window, step)}" if window is not None else
             counted(session.optimizer_steps, step))
    if session.hand_steps:
        steps += " (parameters updated by hand)"
    done = f"{steps} on {counted(session.local, 'rank')}"
    if session.ranks_checked < session.local:
        done += (f" (only {session.ranks_checked} checked: the others' probe did not start, "
                 "see their output)")
    if not session.findings and not session.check and (not job_ok or not session.comparable):
        return ""  # the default check has nothing to add to a failure report, or compared none
    if not session.findings and not job_ok:
        return (f"distrun: check: the job failed after {done}; no problem found in what "
                "the ranks did before")
    if not session.findings and not session.comparable:
        return (f"distrun: check: {done}: nothing compared, the checks compare the ranks of "
                "a node and this node runs one (try a short run of 2 or more processes on "
                "one node: --nnodes 1 --nproc-per-node 2 --check-steps 5)")
    if not session.findings:
        unseen = (f"; {counted(session.sharded_params, 'parameter')} not compared: ZeRO-3 "
                  "holds them as shards") if session.sharded_params else ""
        if not session.check:  # the default check: one line, and how to change it
            after = ("; the rest ran unchecked, --check checks to the end" if window
                     is not None else "")
            return (f"distrun: check: {done}, no problem found{unseen}{after} "
                    "(--no-check: off)")
        return (f"distrun: check: {done}, no problem found (checks run: "
                f"{', '.join(session.checks_run)}{unseen})")
    lines = [f"distrun: check: {done}: {len(session.findings)} problem"
             f"{'s' if len(session.findings) > 1 else ''} found"]
    lines += [finding(f, fix=True) for f in session.findings]
    return "\n".join(lines)


def launch_record(result: RunResult, session: Session, exit_code: int) -> dict[str, object]:
    """The end of a launch as JSON (`--report-json`)."""
    return {
        "exit_code": exit_code, "reason": result.reason, "seconds": round(result.seconds, 3),
        "failures": [{"rank": f.rank, "local_rank": f.local_rank, "host": f.host,
                      "how": f.how, "first": f.root_cause, "error": f.error}
                     for f in result.failures],
        "check": session.mode, "window": session.window,
        "checks_run": session.checks_run, "optimizer_steps": session.optimizer_steps,
        "findings": [f.as_dict() for f in session.findings],
    }


DOCTOR_WIDTH = 18  # the longest check name ("launcher variables"); longer ones push out


def doctor_row(r: CheckResult, color: bool = False) -> str:
    """One check, as `doctor` prints it when it finishes: status, name, detail, the fix."""
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}
    kinds = {"ok": "ok", "warn": "warning", "fail": "error", "skip": "skip"}
    width = max(DOCTOR_WIDTH, len(r.name))
    mark = paint(marks[r.status], kinds[r.status], err=False) if color else marks[r.status]
    detail_lines = r.detail.splitlines() or [""]
    lines = [f"{mark}  {r.name:<{width}}  {detail_lines[0]}"]
    lines += [f"{'':<{width + 8}}{more}" for more in detail_lines[1:]]
    if r.hint and r.status in ("warn", "fail"):
        lines.append(f"{'':<{width + 8}}-> {r.hint}")
    return "\n".join(lines)


def doctor_summary(results: list[CheckResult]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "warn", "fail", "skip")}
    return (f"{counts['ok']} ok, {counted(counts['warn'], 'warning')}, "
            f"{counts['fail']} failed, {counts['skip']} skipped")


def doctor_table(results: list[CheckResult]) -> str:
    return "\n".join([*(doctor_row(r) for r in results), "", doctor_summary(results)])
