"""Start-up hook of the projects' shim (tests/projects/shim is first on PYTHONPATH).

Python imports `sitecustomize` at start-up in every process that has the shim on its
path: the original run, `distrun convert`, `distrun launch`, torchrun and every rank.
It stays cheap: nothing heavy is imported here. What it does:

- seeds `random` at once, and `torch` (manual_seed(0)) and `numpy` (seed 0) right after
  they are first imported, so that upstream scripts that never seed still build the same
  initial model in every run and on every rank;
- serves a stub `torch.utils.tensorboard` (a SummaryWriter whose methods accept
  anything) when the real `tensorboard` package is not installed;
- reads the harness knobs below (environment variables; each project's descriptor says
  which ones it sets, always for both runs alike).

Knobs:

DISTRUN_SHIM_NO_DROPOUT=1   every functional dropout (F.dropout, dropout1d/2d/3d,
                            alpha_dropout, feature_alpha_dropout) returns its input, so
                            nn.Dropout* modules too: no randomness in the forward pass.
DISTRUN_SHIM_NO_NOISE=1     torch.randn_like returns zeros (the VAE's reparameterisation
                            noise), so the forward pass is deterministic.
DISTRUN_SHIM_NUMPY_UNIFORM_MID=1
                            np.random.uniform returns the middle of its range (a random
                            augmentation parameter, the same in any fetch order).
DISTRUN_SHIM_FLOAT64=1      torch's default dtype is float64 (models and the fake
                            torchvision's tensors): for a project whose float32 rounding
                            (one batch mean against the mean of the ranks' means) grows
                            past 1e-5 over its hard-coded epochs; float64 shows whether
                            the two trainings are the same one.
DISTRUN_SHIM_CUDA_INDEX_TO_CPU=1
                            `.to(<int>)`, `.to("cuda")`, `.to("cuda:N")` on modules and
                            tensors go to the CPU when CUDA is not available (scripts that
                            hard-code `device = 0`).
DISTRUN_SHIM_GPU_SCRIPT_ON_CPU=1
                            an already-distributed GPU script (mp.spawn, --local_rank) runs
                            as one process on the CPU: `.cuda()` returns its object,
                            `torch.cuda.set_device` does nothing, `init_process_group("nccl")`
                            is gloo (127.0.0.1 and a free port when world_size is 1), DDP drops
                            `device_ids` for a CPU module, convert_sync_batchnorm leaves
                            BatchNorm (equal on one process); implies CUDA_INDEX_TO_CPU. For
                            the ORIGINAL run only (the converted script must run on CPU as it is).
DISTRUN_SHIM_NO_WORKERS=1   DataLoader(num_workers=N) loads in the main process: the same
                            batches, without N worker processes started every epoch.
DISTRUN_SHIM_LOOPBACK_ONLY=1
                            `init_process_group` raises at once when MASTER_ADDR (or a tcp://
                            init_method) is not a loopback address: a script's hard-coded
                            cluster address fails fast instead of dialling out.
DISTRUN_SHIM_OLD_APIS=1     the APIs old tutorials call: DataLoader iterators' `.next()`
                            (torch < 1.13), `torch._utils._accumulate` (torch < 2.1),
                            `torch.load` unpickling any object (weights_only=False, < 2.6),
                            the LR schedulers' `verbose=` (accepted, ignored: gone in 2.x),
                            `pad_sequence(seqs, 0)` (an int batch_first, < 2.4),
                            `Sampler.__init__(data_source)` (the argument, dropped after 2.2),
                            `np.Inf` / `np.NaN` / `np.float_` (NumPy 1.x), `np.int` (< 1.24),
                            `np.warnings` (the standard library's `warnings`, < 1.24),
                            `np.in1d` (`np.isin(...).ravel()`, removed in 2.4),
                            `np.random.choice` of a ragged sequence (an object array, < 1.24).
DISTRUN_SHIM_ZERO_DIM_INDEX=1
                            `t[0]` of a 0-dim tensor is a copy of `t`, as in PyTorch 0.4
                            (an IndexError since 0.5): `loss.data[0]` of 2018 scripts.
DISTRUN_SHIM_SEED_BY_RANK=1 seeds as a real multi-process run of an unseeded script does:
                            rank 0 (and the original run) with 0 as usual, rank r > 0 with
                            1000 + r (`random`, `torch`, `numpy`): an unseeded random_split
                            then differs between ranks, as it does for real.
DISTRUN_SHIM_PATH_MAP=SRC=>DST
                            a data folder hard-coded as an absolute path (SRC) is read from
                            DST (relative: the working directory) by `open` (so torch.load),
                            os.path.exists/isfile/isdir and os.listdir; `;` separates pairs.
DISTRUN_SHIM_CAPTURE=PATH   at exit, on global rank 0 only, save {name: state_dict} of every
                            torch.nn.Module found among the globals of `__main__` (a DDP
                            wrapper is unwrapped by the harness, not by the script) to PATH:
                            the checkpoint of scripts that save none. A process with no
                            module in `__main__` (torchrun, distrun) writes nothing.
DISTRUN_SHIM_CAPTURE_DDP=PATH
                            at exit, in the process of global rank 0, saves {"model":
                            state_dict} of the module wrapped by the last
                            DistributedDataParallel made in that process (an mp.spawn
                            worker's model lives in a function: CAPTURE cannot see it).
DISTRUN_SHIM_MAIN_GLOBALS=NAME=VALUE;...
                            the script's top-level constants NAME (literals, no argparse:
                            `max_iters = 3000`) rebound to VALUE right after the script
                            binds them, the file unchanged (_distrun_shim/main_globals.py);
                            `NAME:=EXPR`: EXPR evaluated in the script's globals then.
DISTRUN_SHIM_MAIN_RANGE_CAP=N
                            `range` in the script's globals yields at most N values
                            (a loop length that is a literal inside an expression).
DISTRUN_SHIM_MAIN_PACKAGE=PKG
                            the script, a module of package PKG with relative imports
                            (upstream runs `python -m PKG.script`), gets `__package__`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import random
import sys

random.seed(0)
if os.environ.get("DISTRUN_SHIM_SEED_BY_RANK") == "1":
    from _distrun_shim import knobs as _knobs

    _knobs.seed_by_rank()

if (os.environ.get("DISTRUN_SHIM_MAIN_GLOBALS") or os.environ.get("DISTRUN_SHIM_MAIN_RANGE_CAP")
        or os.environ.get("DISTRUN_SHIM_MAIN_PACKAGE")):
    from _distrun_shim import main_globals as _main_globals

    _main_globals.override(os.environ.get("DISTRUN_SHIM_MAIN_GLOBALS", ""),
                           range_cap=os.environ.get("DISTRUN_SHIM_MAIN_RANGE_CAP"),
                           package=os.environ.get("DISTRUN_SHIM_MAIN_PACKAGE"))

if os.environ.get("DISTRUN_SHIM_PATH_MAP"):
    from _distrun_shim import knobs as _knobs

    _knobs.path_map(os.environ["DISTRUN_SHIM_PATH_MAP"])

_HOOKS: dict = {}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a module's own code has run."""

    def find_spec(self, name, path=None, target=None):
        if name not in _HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader, callback = spec.loader, _HOOKS.pop(name)
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            callback(module)

        loader.exec_module = exec_module
        return spec


class _FakeTensorboard(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`torch.utils.tensorboard` without the tensorboard package: a stub SummaryWriter."""

    NAME = "torch.utils.tensorboard"

    def find_spec(self, name, path=None, target=None):
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)
        try:
            real = importlib.util.find_spec("tensorboard")
        finally:
            sys.meta_path.insert(0, self)
        if real is not None:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from _distrun_shim.tensorboard import SummaryWriter

        module.SummaryWriter = SummaryWriter


def _after_torch(torch):
    torch.manual_seed(0)
    if os.environ.get("DISTRUN_SHIM_SEED_BY_RANK") == "1":
        from _distrun_shim import knobs

        knobs.seed_by_rank(torch=torch)
    if os.environ.get("DISTRUN_SHIM_NO_DROPOUT") == "1":
        from _distrun_shim import knobs

        knobs.no_dropout(torch)
    if os.environ.get("DISTRUN_SHIM_NO_NOISE") == "1":
        from _distrun_shim import knobs

        knobs.no_noise(torch)
    if os.environ.get("DISTRUN_SHIM_FLOAT64") == "1":
        torch.set_default_dtype(torch.float64)
    if os.environ.get("DISTRUN_SHIM_CUDA_INDEX_TO_CPU") == "1":
        from _distrun_shim import knobs

        knobs.cuda_index_to_cpu(torch)
    if os.environ.get("DISTRUN_SHIM_OLD_APIS") == "1":
        from _distrun_shim import knobs

        knobs.old_torch_iterators(torch)
    if os.environ.get("DISTRUN_SHIM_NO_WORKERS") == "1":
        from _distrun_shim import knobs

        knobs.no_workers(torch)
    if os.environ.get("DISTRUN_SHIM_ZERO_DIM_INDEX") == "1":
        from _distrun_shim import knobs

        knobs.zero_dim_index(torch)
    # the loopback guard first: GPU_SCRIPT_ON_CPU's init_process_group (which moves a
    # one-process group to 127.0.0.1) then runs before it
    if os.environ.get("DISTRUN_SHIM_LOOPBACK_ONLY") == "1":
        from _distrun_shim import knobs

        knobs.loopback_only()
    if os.environ.get("DISTRUN_SHIM_GPU_SCRIPT_ON_CPU") == "1":
        from _distrun_shim import knobs

        knobs.gpu_script_on_cpu(torch)
    if os.environ.get("DISTRUN_SHIM_CAPTURE"):
        from _distrun_shim import knobs

        knobs.capture_at_exit(os.environ["DISTRUN_SHIM_CAPTURE"])
    if os.environ.get("DISTRUN_SHIM_CAPTURE_DDP"):
        from _distrun_shim import knobs

        knobs.capture_ddp_at_exit(torch, os.environ["DISTRUN_SHIM_CAPTURE_DDP"])


def _after_numpy(numpy):
    numpy.random.seed(0)
    if os.environ.get("DISTRUN_SHIM_OLD_APIS") == "1":
        from _distrun_shim import knobs

        knobs.old_numpy_names(numpy)
    if os.environ.get("DISTRUN_SHIM_NUMPY_UNIFORM_MID") == "1":
        from _distrun_shim import knobs

        knobs.numpy_uniform_mid(numpy)
    if os.environ.get("DISTRUN_SHIM_SEED_BY_RANK") == "1":
        from _distrun_shim import knobs

        knobs.seed_by_rank(numpy=numpy)


_HOOKS["torch"] = _after_torch
_HOOKS["numpy"] = _after_numpy
sys.meta_path.insert(0, _AfterImport())
sys.meta_path.insert(0, _FakeTensorboard())
