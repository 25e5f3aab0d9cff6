"""Start-up hook of bench_tutorial.py's runs (this folder is first on PYTHONPATH).

Python imports `sitecustomize` at start-up in every process of a run: the launcher
(`distrun launch`, torchrun's agent) and each rank. Nothing heavy is imported here; the
work happens right after the script's own `import torch` has run. Environment:

BENCH_TUTORIAL_TIMES=PATH   the measurement, for both scripts: a global optimizer step
                            post-hook (`register_optimizer_step_post_hook`) records
                            time.perf_counter() after every step; at exit, global rank 0
                            writes the intervals between consecutive steps (seconds, a
                            JSON list) to PATH. A process that made no step (a launcher)
                            writes nothing.
BENCH_TUTORIAL_CPU=1        the hand-written multigpu_torchrun.py only: run its CUDA
                            calls on the CPU when CUDA is not available:
                            init_process_group(backend="nccl") -> "gloo";
                            torch.cuda.set_device(...) does nothing; `.to(<int>)` on
                            modules and tensors -> `.to("cpu")`; DistributedDataParallel's
                            `device_ids` dropped for a module on the CPU.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Calls `_after_torch(torch)` right after `import torch` has run torch's own code."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _after_torch(module)

        loader.exec_module = exec_module
        return spec


def _record_steps(torch: Any, path: str) -> None:
    stamps: list[float] = []
    clock = time.perf_counter
    append = stamps.append

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        append(clock())

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(hook)

    def write() -> None:
        if stamps and os.environ.get("RANK", "0") == "0":
            intervals = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            with open(path, "w") as file:
                json.dump(intervals, file)

    atexit.register(write)


def _cuda_to_cpu(torch: Any) -> None:
    cpu = torch.device("cpu")
    distributed = torch.distributed
    init_process_group = distributed.init_process_group

    def init_gloo(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "nccl":
            kwargs["backend"] = "gloo"
        elif args and args[0] == "nccl":
            args = ("gloo", *args[1:])
        return init_process_group(*args, **kwargs)

    distributed.init_process_group = init_gloo
    torch.cuda.set_device = lambda device: None

    module_to, tensor_to = torch.nn.Module.to, torch.Tensor.to

    # The script's only `.to` calls pass an int: keep the wrappers to one type check.
    def module_to_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and type(args[0]) is int:
            return module_to(self, cpu, *args[1:], **kwargs)
        return module_to(self, *args, **kwargs)

    def tensor_to_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and type(args[0]) is int:
            return tensor_to(self, cpu, *args[1:], **kwargs)
        return tensor_to(self, *args, **kwargs)

    torch.nn.Module.to = module_to_cpu
    torch.Tensor.to = tensor_to_cpu

    ddp = torch.nn.parallel.DistributedDataParallel
    ddp_init = ddp.__init__

    def ddp_init_cpu(self: Any, module: Any, device_ids: Any = None, *args: Any,
                     **kwargs: Any) -> None:
        if all(p.device.type == "cpu" for p in module.parameters()):
            device_ids = None
        ddp_init(self, module, device_ids, *args, **kwargs)

    ddp.__init__ = ddp_init_cpu


def _after_torch(torch: Any) -> None:
    if os.environ.get("BENCH_TUTORIAL_CPU") == "1" and not torch.cuda.is_available():
        _cuda_to_cpu(torch)
    if os.environ.get("BENCH_TUTORIAL_TIMES"):
        _record_steps(torch, os.environ["BENCH_TUTORIAL_TIMES"])


if os.environ.get("BENCH_TUTORIAL_TIMES") or os.environ.get("BENCH_TUTORIAL_CPU"):
    sys.meta_path.insert(0, _AfterTorch())
