"""The real thing: two local processes form a gloo world, and NCCL one on the GPUs (two
processes with 2+ GPUs, a world of one with a single GPU), and run all_reduce, broadcast and
barrier; optionally, all-reduce bandwidth by message size."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

from distrun.doctor.check import CheckResult, Context
from distrun.doctor.platform import gpu_count

TIMEOUT = 60.0
WORKER = "distrun.doctor.worker"


def run_world(backend: str, bandwidth: bool, world: int = 2, timeout: float = TIMEOUT
              ) -> tuple[list[dict[str, object]], float, str]:
    """Start `world` workers; their JSON reports, the wall time, and any error text."""
    from distrun.netinfo import free_port

    port = str(free_port())
    argv = [sys.executable, "-m", WORKER, backend, port, "1" if bandwidth else "0", str(world)]
    started = time.monotonic()
    procs = [subprocess.Popen([*argv, str(rank)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in range(world)]
    reports, errors = [], []
    deadline = started + timeout
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return [], time.monotonic() - started, f"no answer within {timeout:g} s"
        if proc.returncode != 0:
            errors.append(err.strip().splitlines()[-1] if err.strip() else
                          f"exit code {proc.returncode}")
        else:
            reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports, time.monotonic() - started, "; ".join(dict.fromkeys(errors))


def check_smoke(ctx: Context) -> Iterator[CheckResult]:
    if not ctx.smoke:
        yield CheckResult("smoke test", "skip", "--no-smoke")
        return
    gpus = gpu_count()
    worlds = [("gloo", 2)] + ([("nccl", min(2, gpus))] if gpus else [])
    for backend, world in worlds:
        reports, seconds, error = run_world(backend, ctx.bandwidth, world)
        name = f"smoke test ({backend})"
        procs = "1 process" if world == 1 else f"{world} processes"
        if error or len(reports) != world:
            yield CheckResult(name, "fail", f"{procs} could not run collectives: {error}",
                              "see the network checks above; NCCL_DEBUG=INFO tells more")
            continue
        expected = world * (world + 1) / 2
        ok = all(r["all_reduce"] == expected and r["broadcast"] == 7.0 for r in reports)
        detail = (f"all_reduce, broadcast, barrier on {procs} in {seconds:.1f} s "
                  f"(collectives {max(float(str(r['seconds'])) for r in reports) * 1000:.0f} ms)")
        yield CheckResult(name, "ok" if ok else "fail", detail if ok else
                          f"wrong results: {reports}", "" if ok else "report this")
        if ctx.bandwidth and ok:
            table: list[dict[str, float]] = reports[0].get("bandwidth", [])  # type: ignore[assignment]
            rows = [f"{int(row['bytes']):>10} B  algbw {row['algbw']:8.3f} GB/s  "
                    f"busbw {row['busbw']:8.3f} GB/s" for row in table]
            yield CheckResult(f"bandwidth ({backend})", "ok",
                              f"all_reduce, {procs}:\n" + "\n".join(rows))


CHECKS = [check_smoke]
