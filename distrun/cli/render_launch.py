"""The report of a launch: why a job failed, hung or was stopped, which ranks, where
their logs are, and the line that ends a run. Text only; no logic, no I/O (render.py
holds the other renderings and re-exports these).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from distrun.cli.term import paint

if TYPE_CHECKING:
    from distrun.launch.runner import RunResult
    from distrun.launch.spec import LaunchSpec


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


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
        whose = "this rank" if spec.task is not None else "every rank"
        lines.append(f"  logs of {whose}: {result.log_dir}")
    return "\n".join(lines)


def done_line(result: RunResult, spec: LaunchSpec, exit_code: int) -> str:
    """The one line that ends a job that ran to its end: ranks, time, exit code."""
    nproc = spec.nproc_per_node
    ranks = counted(nproc, "rank") if isinstance(nproc, int) else f"{nproc} ranks"
    if spec.task is not None:
        ranks = (f"rank {spec.task.rank} of {spec.task.world_size} (this SLURM task; local "
                 f"rank {spec.task.local_rank})")
    elif spec.launcher == "ray":
        ranks = f"{counted(spec.ranks_here, 'rank')} (Ray Train workers)"
    elif spec.max_nodes > 1:
        node = f"node {spec.node_rank} of {spec.nnodes}" if spec.rdzv_backend == "static" \
            else f"{spec.nnodes} nodes"
        ranks += f" on this node ({node})"
    why = " (--check found a problem)" if exit_code == 3 else ""
    after = f", after {counted(result.restarts, 'restart')}" if result.restarts else ""
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
    if spec.meets_other_nodes and not _started(result):
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

    after = (f" and {counted(result.restarts, 'restart')} (the last attempt's failures "
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
            lines += _unused_parameter_lines(failure.error)
            lines += _ready_twice_lines(failure.error)
        elif failure.error and failure.cause == "also failed":  # its own error, in brief
            lines.append(f"    | {failure.error.splitlines()[-1]}")
        elif failure.cause == "lost peer" and spec.task is not None:  # the task's one rank
            lines += _lost_peer_lines(failure.error, spec)
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
            if spec.meets_other_nodes else "")
    if spec.task is not None:
        node = ("; it may be another SLURM task (each rank is one): look at the job's "
                "output for the rank that failed first")
    return [f"  lost peer: {where} went away (crashed, killed, or cut off from the network) "
            f"and this rank failed because of it{node}"]


_NO_SUCH_GPU = ("invalid device ordinal", "Duplicate GPU detected")


_UNUSED = re.compile(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)")


def _unused_parameter_lines(error: str) -> list[str]:
    """DDP's error at the step after one where some parameters got no gradient (layers
    built and never called, outputs that do not reach the loss)."""
    if "Expected to have finished reduction in the prior iteration" not in error:
        return []
    found = _UNUSED.search(error)
    which = f" (parameters {found[1].strip()} of the model, in the order of " \
        "`model.parameters()`)" if found else ""
    return [f"  hint: some parameters got no gradient in a step{which}: a layer built "
            "but not used in forward, or an output that does not reach the loss. Pass "
            "`find_unused_parameters=True` to DistributedDataParallel(...) (it costs a "
            "pass over the graph each step), or remove what is unused"]


def _ready_twice_lines(error: str) -> list[str]:
    """DDP's error when a parameter's gradient arrives twice in one backward: activation
    checkpointing in its reentrant form under find_unused_parameters=True, or a module
    run twice in a step under checkpointing."""
    if "Expected to mark a variable ready only once" not in error:
        return []
    return ["  hint: a parameter's gradient arrived twice in one backward: activation "
            "checkpointing in its reentrant form (`torch.utils.checkpoint.checkpoint(...)` "
            "without `use_reentrant=False`) with `find_unused_parameters=True`. Pass "
            "`use_reentrant=False` to each checkpoint call (the same gradients), or give "
            "DistributedDataParallel(...) `static_graph=True` if the same parameters are used "
            "at every step"]


def _missing_gpu_lines(error: str, local_rank: int, spec: LaunchSpec) -> list[str]:
    """A rank that found no GPU of its own: more processes per node than GPUs."""
    if not any(text in error for text in _NO_SUCH_GPU):
        return []
    return [f"  hint: local rank {local_rank} has no GPU of its own: {spec.nproc_per_node} "
            "processes per node but fewer GPUs visible (the script uses GPU LOCAL_RANK); "
            "pass --nproc-per-node gpu (one process per GPU), or check CUDA_VISIBLE_DEVICES"]
