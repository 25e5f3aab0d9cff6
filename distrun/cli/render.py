"""Text, JSON and diff renderings of the core's result records. No logic, no I/O."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

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
    from distrun.launch.spec import Command, LaunchSpec


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
    counts = f"{_count(len(result.changes), 'change')}, {_count(warnings, 'warning')}"
    unresolved = sum(1 for f in result.findings if RULES[f.rule].blocks
                     and f.severity == "error")
    if unresolved:
        counts = f"PARTIAL ({_count(unresolved, 'error')} unresolved), " + counts
    return f"{filename}{where}: {counts}"


def next_steps(result: ConvertResult, written: str, gpus: int) -> list[str]:
    """After a conversion: the command that launches the new script, and, when each rank
    now reads its share of the data, what that does to the batch (one line each)."""
    import shlex

    launcher = [] if result.launcher == "torchrun" else ["--launcher", result.launcher]
    nproc = "gpu" if gpus else "2"
    where = f"one process per GPU ({gpus} here)" if gpus else "2 processes on this CPU"
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


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


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
            f"({changed}), {_count(changes, 'change')}, {_count(warnings, 'warning')}")


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


def launch_report(result: RunResult, spec: LaunchSpec) -> str:
    if result.reason == "ok":
        notes = _log_space_lines(result)
        if result.log_dir and not spec.keep_logs:  # a temporary folder left: output was lost
            notes.append(f"distrun: the output of every rank is in {result.log_dir}")
        return "\n".join(notes)
    if result.reason == "port-taken":
        return "\n".join(_port_taken_lines(result, spec))
    if result.reason == "interrupted":
        lines = [f"distrun: job stopped by {result.detail} after {result.seconds:.1f} s; "
                 "every process was ended"]
    elif result.reason == "hung":
        lines = _hung_lines(result, spec)
    else:
        lines = _failed_lines(result, spec)
    lines += _log_space_lines(result)
    if result.log_dir:
        lines.append(f"  logs of every rank: {result.log_dir}")
    return "\n".join(lines)


def done_line(result: RunResult, spec: LaunchSpec, exit_code: int) -> str:
    """The one line that ends a job that ran to its end: ranks, time, exit code."""
    nproc = spec.nproc_per_node
    ranks = _count(nproc, "rank") if isinstance(nproc, int) else f"{nproc} ranks"
    if spec.max_nodes > 1:
        node = f"node {spec.node_rank} of {spec.nnodes}" if spec.rdzv_backend == "static" \
            else f"{spec.nnodes} nodes"
        ranks += f" on this node ({node})"
    why = " (--check found a problem)" if exit_code == 3 else ""
    after = f", after {_count(result.restarts, 'restart')}" if result.restarts else ""
    line = paint(f"distrun: done: {ranks}, {result.seconds:.1f} s, exit code {exit_code}"
                 f"{why}{after}", "ok" if exit_code == 0 else "warning")
    return "\n".join([*_restart_lines(result), line])


def _restart_lines(result: RunResult) -> list[str]:
    """The first failure of every attempt that was restarted."""
    lines = []
    for attempt in result.earlier:
        if attempt.local_rank is None:
            lines.append(f"distrun: attempt {attempt.number} failed; restarted")
            continue
        last = attempt.error.splitlines()[-1] if attempt.error else "no error in its log"
        lines.append(f"distrun: attempt {attempt.number} failed, first at local rank "
                     f"{attempt.local_rank}: {last}; restarted")
    return lines


def _port_taken_lines(result: RunResult, spec: LaunchSpec) -> list[str]:
    what = "master port" if result.detail == str(spec.master_port) else "port"
    return [f"distrun: error: {what} {result.detail} was taken by another process after "
            "distrun checked it was free, before torchrun could listen on it; no worker "
            "started",
            "  hint: run again (a port left to distrun is chosen anew), or pass another "
            "--master-port"]


def _hung_lines(result: RunResult, spec: LaunchSpec) -> list[str]:
    if spec.max_nodes > 1 and not _started(result):
        meet = spec.rdzv_endpoint or f"{spec.master_addr}:{spec.master_port}"
        host, _, port = meet.rpartition(":")
        return [f"distrun: error: this node did not meet the other nodes within "
                f"{spec.timeout:g} s: no worker started; the rendezvous at {meet} never "
                "completed; the job was stopped (--timeout)",
                f"  hint: check that {host} is node 0's address and that its port is "
                f"reachable from here (`distrun doctor --master-addr {host} --master-port "
                f"{port}` on this node), and that every node was started with the same "
                "--nnodes"]
    lines = [f"distrun: error: the job made no progress: {result.detail}; it was stopped "
             "(--timeout)"]
    if not result.any_output:  # nothing had started: no collective to blame
        from distrun.launch.progress import STARTUP_GRACE_SECONDS

        return lines + [
            "  no rank had printed a line yet: the job was still starting (importing, "
            "loading data, setting up the process group) or stuck before its first line",
            f"  hint: if its start-up takes longer than --timeout plus "
            f"{STARTUP_GRACE_SECONDS:g} s, pass a larger --timeout (silence counts from a "
            "rank's first line); if it is stuck in init_process_group, check that every "
            "rank reaches the master address (`distrun doctor`)"]
    lines += result.waits
    ended = _ended_early_lines(result, "had already ended (exit code 0) while the others "
                               "waited for it")
    if ended or result.waits:
        return lines + ended
    return lines + [
        "  hint: a rank may be waiting in a collective another rank never joins (run with "
        "the default check, not --no-check, and distrun says where each rank waits); "
        "NCCL_DEBUG=INFO or TORCH_DISTRIBUTED_DEBUG=DETAIL tell more"]


def _failed_lines(result: RunResult, spec: LaunchSpec) -> list[str]:
    from distrun.launch.failures import error_log

    after = (f" and {_count(result.restarts, 'restart')} (the last attempt's failures "
             "first)") if result.restarts else ""
    lines = [*_restart_lines(result),
             f"distrun: error: the job failed after {result.seconds:.1f} s{after}"]
    for failure in result.failures:
        cause = f"[{failure.cause}]"
        if failure.root_cause:
            cause = paint(cause, "first")
        lines.append(f"  rank {failure.rank} (local rank {failure.local_rank}) on "
                     f"{failure.host}: {failure.how} {cause}")
        if failure.error and failure.root_cause:
            lines += [f"    | {line}" for line in failure.error.splitlines()]
            log = error_log(result.log_dir, failure.local_rank) if result.log_dir else None
            if log is not None:
                lines.append(f"    log: {log}")
            lines += _lost_peer_lines(failure.error, spec)
            lines += _missing_gpu_lines(failure.error, failure.local_rank, spec)
        elif failure.error and failure.cause == "also failed":  # its own error, in brief
            lines.append(f"    | {failure.error.splitlines()[-1]}")
    lines += _ended_early_lines(result, "exit code 0 while the others still ran "
                                "[ended early]")
    if result.detail:
        lines.append(result.detail)
    return lines


def _ended_early_lines(result: RunResult, how: str) -> list[str]:
    """The ranks that returned while others still needed them, and what that does."""
    if not result.ended_early:
        return []
    host = f" on {result.failures[0].host}" if result.failures else ""
    lines = []
    for rank, local in result.ended_early:
        who = f"rank {rank} (local rank {local})" if rank is not None else f"local rank {local}"
        lines.append(f"  {who}{host}: {how}")
    lines.append("  hint: a rank that returns before the others leaves them waiting for it in "
                 "their next collective (gloo then reports a lost connection; NCCL may wait "
                 "for ever): every rank must run the same collectives the same number of times")
    return lines


def _log_space_lines(result: RunResult) -> list[str]:
    """A full disk under --log-dir: the ranks' output goes through it, so say so."""
    if result.log_space is None or not result.log_dir:
        return []
    where = (f"the file system of the log folder {result.log_dir} is full "
             f"({result.log_space >> 10} KiB free)")
    if result.reason == "ok":
        return [f"distrun: warning: {where}: the logs there are incomplete"]
    return [f"  {where}: the ranks could not write their output there (it goes through "
            "--log-dir), which is likely why the job failed",
            "  hint: free space there, or pass --log-dir on a disk with room"]


def _started(result: RunResult) -> bool:
    from distrun.launch.failures import workers_started

    return workers_started(result.log_dir)


def _lost_peer_lines(error: str, spec: LaunchSpec) -> list[str]:
    from distrun.launch.failures import lost_peer

    peer = lost_peer(error)
    if peer is None:
        return []
    where = f"the process at {peer}" if peer else "a peer process"
    node = ("; it may be another node: look at that node's output and logs"
            if spec.max_nodes > 1 else "")
    return [f"  lost peer: {where} went away (crashed, killed, or cut off from the network) "
            f"and this rank failed because of it{node}"]


_NO_SUCH_GPU = ("invalid device ordinal", "Duplicate GPU detected")


def _missing_gpu_lines(error: str, local_rank: int, spec: LaunchSpec) -> list[str]:
    """A rank that found no GPU of its own: more processes per node than GPUs."""
    if not any(text in error for text in _NO_SUCH_GPU):
        return []
    return [f"  hint: local rank {local_rank} has no GPU of its own: {spec.nproc_per_node} "
            "processes per node but fewer GPUs visible (the script uses GPU LOCAL_RANK); "
            "pass --nproc-per-node gpu (one process per GPU), or check CUDA_VISIBLE_DEVICES"]


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
    steps = (f"the first {_count(window, 'optimizer step')}" if window is not None else
             _count(session.optimizer_steps, 'optimizer step'))
    done = f"{steps} on {_count(session.local, 'rank')}"
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
        unseen = (f"; {_count(session.sharded_params, 'parameter')} not compared: ZeRO-3 "
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
    return (f"{counts['ok']} ok, {_count(counts['warn'], 'warning')}, "
            f"{counts['fail']} failed, {counts['skip']} skipped")


def doctor_table(results: list[CheckResult]) -> str:
    return "\n".join([*(doctor_row(r) for r in results), "", doctor_summary(results)])
