"""The machine: shared memory, open-file limit, CPU threads, and environment variables
that break runs when left set by mistake."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

from distrun.doctor.check import CheckResult, Context
from distrun.launch import shm

MIN_SHM = 1 << 30
MIN_FILES = 4096


def check_shm(ctx: Context) -> Iterator[CheckResult]:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        yield CheckResult("/dev/shm", "warn", "no /dev/shm here",
                          "DataLoader workers and NCCL share memory through /dev/shm")
        return
    size = stat.f_blocks * stat.f_frsize
    free = stat.f_bavail * stat.f_frsize
    detail = f"{size / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)"
    if size < MIN_SHM:
        yield CheckResult("/dev/shm", "warn", detail, "under 1 GiB: DataLoader workers crash "
                          "with 'Bus error'; in Docker run with --shm-size=8g or --ipc=host")
    else:
        yield CheckResult("/dev/shm", "ok", detail)
    left = shm.leftovers()
    if left.files:
        yield CheckResult("/dev/shm leftovers", "warn", f"{left.describe()} of DeepSpeed "
                          "CPU all-reduce buffers that no running process holds",
                          f"jobs that ended left them (DeepSpeed never frees them; distrun "
                          f"launch removes them after each job): rm {shm.SHM}/"
                          f"{shm.PATTERNS[0]} when no DeepSpeed job runs here")


def check_open_files(ctx: Context) -> Iterator[CheckResult]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    detail = f"soft {soft}, hard {hard}"
    if soft != resource.RLIM_INFINITY and soft < MIN_FILES:
        yield CheckResult("open files", "warn", detail, "DataLoader workers share tensors "
                          f"through file descriptors: raise it, e.g. ulimit -n {min(hard, 65536)}")
    else:
        yield CheckResult("open files", "ok", detail)


def check_threads(ctx: Context) -> Iterator[CheckResult]:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    omp = ctx.environ.get("OMP_NUM_THREADS")
    nproc_text = ctx.nproc_per_node or ""
    nproc = int(nproc_text) if nproc_text.isdigit() else 1
    if omp is None:
        yield CheckResult("cpu threads", "ok", f"{cpus} CPU(s); OMP_NUM_THREADS unset "
                          "(torchrun sets 1 per process)")
    elif not omp.isdigit() or int(omp) < 1:
        yield CheckResult("cpu threads", "warn", f"OMP_NUM_THREADS={omp!r} is not a number",
                          "unset it or set a positive number")
    elif int(omp) * nproc > cpus:
        yield CheckResult("cpu threads", "warn", f"OMP_NUM_THREADS={omp} x {nproc} process(es) "
                          f"> {cpus} CPU(s)", f"oversubscribed: use OMP_NUM_THREADS="
                          f"{max(1, cpus // nproc)}")
    else:
        yield CheckResult("cpu threads", "ok", f"{cpus} CPU(s), OMP_NUM_THREADS={omp}")


_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_SCHEDULERS = ("SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST", "TORCHELASTIC_RUN_ID")


def check_environment(ctx: Context) -> Iterator[CheckResult]:
    env = ctx.environ
    leftover = [name for name in _LAUNCHER_VARS if name in env]
    scheduler = next((name for name in _SCHEDULERS if name in env), None)
    if leftover and scheduler is None:
        yield CheckResult("launcher variables", "warn", "set in this shell: " + ", ".join(
            f"{n}={env[n]}" for n in leftover), "left over from an earlier job? unset them: "
            "a script started with plain python would think it is rank "
            f"{env.get('RANK', '?')} of {env.get('WORLD_SIZE', '?')}")
    elif leftover:
        yield CheckResult("launcher variables", "ok", f"{', '.join(leftover)} set by the "
                          f"scheduler ({scheduler})")
    else:
        yield CheckResult("launcher variables", "ok", "none left over in this shell")
    for name in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE"):
        if env.get(name, "0") not in ("0", ""):
            yield CheckResult(name, "warn", f"{name}={env[name]}", "it slows or reroutes GPU "
                              "traffic: keep it only as a workaround for a known fault")
    debug = env.get("NCCL_DEBUG")
    yield CheckResult("debug variables", "ok",
                      f"NCCL_DEBUG={debug}" if debug else "NCCL_DEBUG unset",
                      "" if debug else "when a job hangs: NCCL_DEBUG=INFO and "
                      "TORCH_DISTRIBUTED_DEBUG=DETAIL show where")


CHECKS = [check_shm, check_open_files, check_threads, check_environment]
