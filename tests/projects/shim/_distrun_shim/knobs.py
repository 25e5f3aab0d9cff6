"""The harness knobs of the shim (read by ../sitecustomize.py from the environment)."""

from __future__ import annotations

import atexit
import os
import sys


def no_dropout(torch):
    functional = torch.nn.functional

    def identity(input, *args, **kwargs):
        return input

    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                 "feature_alpha_dropout"):
        setattr(functional, name, identity)


def no_noise(torch):
    torch.randn_like = lambda input, *args, **kwargs: torch.zeros_like(
        input, dtype=kwargs.get("dtype"))


def _cpu_if_cuda(torch, device):
    if torch.cuda.is_available():
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("cpu")
    if isinstance(device, str) and device.startswith("cuda"):
        return torch.device("cpu")
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("cpu")
    return device


def cuda_index_to_cpu(torch):
    module_to, tensor_to = torch.nn.Module.to, torch.Tensor.to

    def fix(args, kwargs):
        if args:
            args = (_cpu_if_cuda(torch, args[0]), *args[1:])
        if "device" in kwargs:
            kwargs = {**kwargs, "device": _cpu_if_cuda(torch, kwargs["device"])}
        return args, kwargs

    def module_to_cpu(self, *args, **kwargs):
        args, kwargs = fix(args, kwargs)
        return module_to(self, *args, **kwargs)

    def tensor_to_cpu(self, *args, **kwargs):
        args, kwargs = fix(args, kwargs)
        return tensor_to(self, *args, **kwargs)

    torch.nn.Module.to = module_to_cpu
    torch.Tensor.to = tensor_to_cpu


def capture_at_exit(path):
    def save():
        if int(os.environ.get("RANK", "0")) != 0:
            return
        main = sys.modules.get("__main__")
        import torch

        found = {}
        for name, value in list(vars(main).items()):
            if isinstance(value, torch.nn.Module):
                if type(value).__name__ == "DistributedDataParallel":
                    value = value.module
                found[name] = {k: v.detach().cpu().clone() for k, v in
                               value.state_dict().items()}
        if found:  # launchers (torchrun, distrun) import torch too: they have no model
            torch.save(found, path)

    atexit.register(save)
