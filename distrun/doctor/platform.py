"""Python, torch and its distributed backends, CUDA, GPUs, NCCL, visible devices."""

from __future__ import annotations

import platform as _platform
import shutil
import subprocess
import sys
from collections.abc import Iterator

from distrun.doctor.check import CheckResult, Context, Status


def check_python(ctx: Context) -> Iterator[CheckResult]:
    version = _platform.python_version()
    ok = sys.version_info >= (3, 10)
    yield CheckResult("python", "ok" if ok else "fail", f"{version} ({sys.executable})",
                      "" if ok else "use Python 3.10 or newer")


def check_torch(ctx: Context) -> Iterator[CheckResult]:
    try:
        import torch
    except ImportError as err:
        yield CheckResult("torch", "fail", f"cannot import torch: {err}",
                          "pip install torch (the build matching your CUDA driver)")
        return
    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip}"
    else:
        build = "CPU only"
    yield CheckResult("torch", "ok", f"{torch.__version__} ({build} build)")
    import torch.distributed as dist

    if not dist.is_available():
        yield CheckResult("torch.distributed", "fail", "this torch build has no distributed "
                          "support", "install a torch build with distributed support")
        return
    backends = {name: getattr(dist, f"is_{name}_available")()
                for name in ("gloo", "nccl", "mpi")}
    listed = ", ".join(f"{n} {'yes' if ok else 'no'}" for n, ok in backends.items())
    if not backends["gloo"]:
        yield CheckResult("backends", "fail", listed, "gloo is needed for CPU runs: "
                          "reinstall torch")
    elif torch.cuda.is_available() and not backends["nccl"]:
        yield CheckResult("backends", "fail", listed, "GPUs without NCCL: install a CUDA "
                          "build of torch")
    else:
        yield CheckResult("backends", "ok", listed)


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_cuda(ctx: Context) -> Iterator[CheckResult]:
    try:
        import torch
    except ImportError:
        return
    visible = ctx.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        status: Status = "warn" if visible.strip() in ("", "-1") else "ok"
        yield CheckResult("CUDA_VISIBLE_DEVICES", status, repr(visible),
                          "it hides every GPU: unset it" if status == "warn" else "")
    if not torch.cuda.is_available():
        yield CheckResult("cuda", "skip", "no CUDA device: runs use gloo on the CPU")
        return
    count = torch.cuda.device_count()
    names = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        names.append(f"{i}: {props.name} {props.total_memory / 2**30:.0f} GiB")
    yield CheckResult("gpus", "ok", f"{count} GPU(s): " + "; ".join(names))
    nccl = ".".join(str(p) for p in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    yield CheckResult("nccl", "ok", f"NCCL {nccl}")
    yield from _driver(str(torch.version.cuda))


def _driver(built_for: str) -> Iterator[CheckResult]:
    if not shutil.which("nvidia-smi"):
        yield CheckResult("driver", "skip", "nvidia-smi not found")
        return
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20).stdout.split()
    smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    supported = next((line.split("CUDA Version:")[1].split()[0] for line in smi.splitlines()
                      if "CUDA Version:" in line), None)
    detail = f"driver {out[0] if out else '?'} supports CUDA {supported}; torch built for CUDA " \
             f"{built_for}"
    if supported and _version(supported) < _version(built_for):
        yield CheckResult("driver", "fail", detail, "update the NVIDIA driver, or install a "
                          f"torch build for CUDA {supported} or older")
    else:
        yield CheckResult("driver", "ok", detail)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def check_nproc(ctx: Context) -> Iterator[CheckResult]:
    if ctx.nproc_per_node is None or not ctx.nproc_per_node.isdigit():
        return
    yield nproc_result(int(ctx.nproc_per_node), gpu_count(), cpu_count(),
                       ctx.environ.get("OMP_NUM_THREADS"))


def cpu_count() -> int:
    """The CPUs this process may run on."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def nproc_result(nproc: int, gpus: int, cpus: int | None = None, omp: str | None = None
                 ) -> CheckResult:
    """`nproc` processes against the GPUs, or on a CPU-only machine against the CPUs:
    more GPU ranks than GPUs fail; more CPU ranks than CPUs oversubscribe them, even at
    one thread each (torchrun's default; more threads: the cpu threads check)."""
    if gpus == 0:
        threads = int(omp) if omp is not None and omp.isdigit() and int(omp) > 0 else 1
        if cpus is not None and nproc > cpus:
            each = f" x {threads} threads each" if threads > 1 else ""
            return CheckResult("nproc_per_node", "warn", f"{nproc} CPU process(es){each} on "
                               f"{cpus} CPU(s): oversubscribed", "the ranks take turns on the "
                               "CPUs and every step waits for the slowest: use --nproc-per-node "
                               f"{max(1, cpus // threads)} (or cpu: one per CPU), or a machine "
                               "with more CPUs or GPUs")
        return CheckResult("nproc_per_node", "ok", f"{nproc} CPU process(es) with gloo")
    if nproc > gpus:
        return CheckResult("nproc_per_node", "fail", f"{nproc} processes but {gpus} GPU(s)",
                           f"use --nproc-per-node {gpus} (or auto): two ranks on one GPU make "
                           "NCCL fail with 'Duplicate GPU detected'")
    return CheckResult("nproc_per_node", "ok", f"{nproc} of {gpus} GPU(s)")


CHECKS = [check_python, check_torch, check_cuda, check_nproc]
