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


def gpu_script_on_cpu(torch):
    """An already-distributed GPU script (mp.spawn, torch.distributed.launch) run as ONE
    process on a CPU-only machine, for the original run of a project: `.cuda()` of
    modules and tensors returns them as they are, `torch.cuda.set_device` does nothing,
    `init_process_group("nccl")` becomes gloo (at 127.0.0.1 and a free port when the
    group has one process), DistributedDataParallel drops `device_ids` /
    `output_device` for a module on the CPU, and `SyncBatchNorm.convert_sync_batchnorm`
    leaves BatchNorm as it is (the same on one process; SyncBatchNorm cannot run on the
    CPU). Only with CUDA missing. Implies cuda_index_to_cpu (`.to(0)`, `.to("cuda")`)."""
    if torch.cuda.is_available():
        return
    cuda_index_to_cpu(torch)
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.cuda.set_device = lambda *args, **kwargs: None

    import torch.distributed as dist

    original_init = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if backend is None or "nccl" in str(backend):
            backend = "gloo"
        world_size = kwargs.get("world_size", os.environ.get("WORLD_SIZE", -1))
        if int(world_size) == 1:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(port)
        return original_init(backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    ddp = torch.nn.parallel.DistributedDataParallel
    original_ddp_init = ddp.__init__

    def ddp_init(self, module, *args, **kwargs):
        on_cpu = all(p.device.type == "cpu" for p in module.parameters())
        if on_cpu:
            kwargs.pop("device_ids", None)
            kwargs.pop("output_device", None)
            args = ()  # device_ids and output_device are its first positional arguments
        original_ddp_init(self, module, *args, **kwargs)

    ddp.__init__ = ddp_init
    # SyncBatchNorm has no CPU kernel (it raises as soon as a process group exists); on
    # ONE process it computes what BatchNorm computes: the conversion leaves BatchNorm
    torch.nn.SyncBatchNorm.convert_sync_batchnorm = classmethod(
        lambda cls, module, process_group=None: module)


def seed_by_rank(torch=None, numpy=None):
    """The seed a real multi-process run gives a script that never seeds: a different
    one in every process. Rank 0 (and a process with no RANK: the original run) keeps
    seed 0, so the original and the converted rank 0 draw alike; rank r > 0 draws from
    seed 1000 + r (`random`, `torch`, `numpy`)."""
    rank = int(os.environ.get("RANK", "0"))
    seed = 0 if rank == 0 else 1000 + rank
    import random

    random.seed(seed)
    if torch is not None:
        torch.manual_seed(seed)
    if numpy is not None:
        numpy.random.seed(seed)


def no_workers(torch):
    """DataLoader(num_workers=N) loads in the main process (num_workers=0): the same
    batches in the same order, without starting N processes per epoch (a project that
    hard-codes workers stays within its time budget on 2 cores)."""
    import torch.utils.data

    loader = torch.utils.data.DataLoader
    original_init = loader.__init__

    def init(self, *args, **kwargs):
        if len(args) > 5:  # dataset, batch_size, shuffle, sampler, batch_sampler, num_workers
            args = (*args[:5], 0, *args[6:])
        else:
            kwargs["num_workers"] = 0
        kwargs.pop("prefetch_factor", None)
        kwargs.pop("persistent_workers", None)
        original_init(self, *args, **kwargs)

    loader.__init__ = init


_WRAPPED: list = []


def capture_ddp_at_exit(torch, path):
    """At exit, in the process of global rank 0, saves {"model": state_dict} of the
    module wrapped by the LAST DistributedDataParallel made in that process, to PATH:
    the checkpoint of already-distributed scripts that save none and keep the model in
    a function's locals (an mp.spawn worker). The rank is the process group's when the
    wrap was made. A process that made no DDP object writes nothing."""
    ddp = torch.nn.parallel.DistributedDataParallel
    original_init = ddp.__init__

    def ddp_init(self, module, *args, **kwargs):
        original_init(self, module, *args, **kwargs)
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
        _WRAPPED.append((rank, module))

    ddp.__init__ = ddp_init

    def save():
        if not _WRAPPED:
            return
        rank, module = _WRAPPED[-1]
        if rank != 0:
            return
        state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        torch.save({"model": state}, path)

    atexit.register(save)


_LOOPBACK = ("127.", "localhost", "::1")


def loopback_only():
    """`init_process_group` refuses a rendezvous away from this machine: a script's
    hard-coded MASTER_ADDR (or a tcp:// init_method) that is not a loopback address
    raises at once, naming it, instead of the job dialling out and waiting for minutes.
    For both runs of a project whose script hard-codes one (the converted script should
    leave the address to the launcher; if it does not, this makes it fail fast)."""
    import torch.distributed as dist

    original_init = dist.init_process_group

    def init_process_group(*args, **kwargs):
        method = str(kwargs.get("init_method") or (args[1] if len(args) > 1 else "") or "")
        host = ""
        if method.startswith("tcp://"):
            host = method[len("tcp://"):].rsplit(":", 1)[0]
        elif not method or method.startswith("env://"):
            host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        if host and not host.startswith(_LOOPBACK):
            raise RuntimeError(f"the projects' shim refuses a rendezvous at {host!r} (not "
                               f"this machine): MASTER_ADDR / init_method hard-coded by the "
                               f"script (DISTRUN_SHIM_LOOPBACK_ONLY)")
        return original_init(*args, **kwargs)

    dist.init_process_group = init_process_group


def old_torch_iterators(torch):
    """DataLoader iterators get back `.next()` (removed in torch 1.13; tutorials of the
    time call `dataiter.next()`), `torch._utils._accumulate` (removed in torch 2.1),
    `torch.load` of any object, the LR schedulers' `verbose` argument,
    `pad_sequence`'s `batch_first` of any truthiness (an int: torch < 2.4), and
    `Sampler.__init__(data_source)` (the argument dropped after torch 2.2)."""
    from torch.utils.data import dataloader

    dataloader._BaseDataLoaderIter.next = dataloader._BaseDataLoaderIter.__next__
    # `from torch._utils import _accumulate` (random_split's helper until torch 2.1;
    # clovaai's dataset.py imports it): itertools.accumulate is what it was
    import itertools

    import torch._utils

    if not hasattr(torch._utils, "_accumulate"):
        torch._utils._accumulate = itertools.accumulate
    # torch.load unpickled any object until torch 2.6 (weights_only=False): code of the
    # time caches its own classes with torch.save and loads them back
    import functools

    load = torch.load

    @functools.wraps(load)
    def load_as_before_2_6(*args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return load(*args, **kwargs)

    torch.load = load_as_before_2_6
    # ReduceLROnPlateau(..., verbose=True), LambdaLR(..., verbose=True) and every other
    # scheduler's `verbose`: deprecated in torch 2.2, gone since; its only effect was a
    # printed line when the rate changed
    import inspect

    def without_verbose(init):
        @functools.wraps(init)
        def init_as_before(self, *args, **kwargs):
            kwargs.pop("verbose", None)
            init(self, *args, **kwargs)

        return init_as_before

    for scheduler in vars(torch.optim.lr_scheduler).values():
        if (isinstance(scheduler, type) and "__init__" in scheduler.__dict__
                and hasattr(torch.optim.lr_scheduler, "LRScheduler")
                and (issubclass(scheduler, torch.optim.lr_scheduler.LRScheduler)
                     or scheduler is torch.optim.lr_scheduler.ReduceLROnPlateau)
                and "verbose" not in inspect.signature(scheduler.__init__).parameters):
            scheduler.__init__ = without_verbose(scheduler.__init__)
    # pad_sequence(seqs, 0): a Python function until torch 2.4 took any truthy value as
    # `batch_first`; its C++ replacement takes a bool only (voice100's collate passes its
    # BLANK_IDX = 0 there)
    from torch.nn.utils import rnn

    pad_sequence = rnn.pad_sequence

    @functools.wraps(pad_sequence)
    def pad_sequence_as_before(sequences, batch_first=False, *args, **kwargs):
        return pad_sequence(sequences, bool(batch_first), *args, **kwargs)

    rnn.pad_sequence = pad_sequence_as_before
    # Sampler.__init__(data_source): the argument, ignored since torch 2.2, was accepted
    # until it was dropped (no Sampler.__init__ of its own now, so object's takes none);
    # samplers of the time call `super().__init__(data)` (PyTorch-NLP's SortedSampler)
    from torch.utils.data import Sampler

    if "__init__" not in Sampler.__dict__:
        def sampler_init_as_before(self, data_source=None):
            pass

        Sampler.__init__ = sampler_init_as_before


def old_numpy_names(numpy):
    """NumPy 1.x aliases removed in NumPy 2 (or 1.24) that tutorials of the time use:
    `np.Inf`, `np.NaN`, `np.float_`, and `np.int` (the builtin int, an alias removed in
    1.24: rixwew/pytorch-fm's `astype(np.int)`); `np.warnings`, the standard library's
    `warnings` module that numpy/__init__.py imported and left in its namespace until 1.24
    (changhyeonnam/NCF's `np.warnings.filterwarnings('ignore')`); `np.in1d` (deprecated
    in 2.0, removed in 2.4: `np.isin(...).ravel()`, what 2.x's in1d returned; the
    RotatE repository's negative sampling); and `np.random.choice` of a ragged sequence
    (an error since 1.24: see _choice_of_ragged)."""
    for old, new in (("Inf", "inf"), ("NaN", "nan"), ("float_", "float64")):
        if old not in numpy.__dict__:
            setattr(numpy, old, getattr(numpy, new))
    if "int" not in numpy.__dict__:
        numpy.int = int
    if "warnings" not in numpy.__dict__:
        import warnings

        numpy.warnings = warnings
    if "in1d" not in numpy.__dict__:

        def in1d(ar1, ar2, assume_unique=False, invert=False, **kwargs):
            return numpy.isin(ar1, ar2, assume_unique=assume_unique, invert=invert,
                              **kwargs).ravel()

        numpy.in1d = in1d
    numpy.random.choice = _choice_of_ragged(numpy, numpy.random.choice)


def _choice_of_ragged(numpy, original):
    """`np.random.choice(options)` of a ragged sequence (`(None, (0.1, None), ...)`,
    ssd.pytorch's RandomSampleCrop modes, copied by qfgaohao/pytorch-ssd): NumPy < 1.24
    made it an object array and drew from it; since, `np.asarray` raises ValueError. The
    sequence becomes that object array here, so the same draw is taken from the global
    generator as then."""

    def choice(a, *args, **kwargs):
        try:
            return original(a, *args, **kwargs)
        except ValueError:
            if not isinstance(a, (list, tuple)):
                raise
            options = numpy.empty(len(a), dtype=object)
            options[:] = list(a)
            return original(options, *args, **kwargs)

    return choice


def numpy_uniform_mid(numpy):
    """`np.random.uniform(low, high, size)` gives the middle of its range (an array of it
    when `size` is given): an augmentation's parameter drawn per sample from NumPy's global
    generator (sthalles/SimCLR's GaussianBlur sigma) is the same whatever order, and on
    whichever rank, the samples are fetched."""

    def middle(low=0.0, high=1.0, size=None):
        value = (numpy.asarray(low, dtype=float) + numpy.asarray(high, dtype=float)) / 2
        return float(value) if size is None and value.ndim == 0 else numpy.broadcast_to(
            value, () if size is None else size).copy()

    numpy.random.uniform = middle


def zero_dim_index(torch):
    """`t[0]` of a 0-dim tensor gives a copy of `t`, as in PyTorch 0.4 (which warned; an
    IndexError since 0.5): scripts of the PyTorch 0.3 era sum their loss with
    `loss.data[0]` (facebookresearch/mixup-cifar10, 2018). Any other index, and any index
    of a tensor with dimensions, goes to torch's own `__getitem__`."""
    getitem = torch.Tensor.__getitem__

    def getitem_as_in_0_4(self, index):
        if type(index) is int and index == 0 and self.dim() == 0:
            return self.clone()
        return getitem(self, index)

    torch.Tensor.__getitem__ = getitem_as_in_0_4


def path_map(spec):
    """A data folder hard-coded as an absolute path outside the run folder
    (sgrvinod's HAN: `data_folder = '/media/ssd/han data'`) read from the run folder
    instead: `SRC=>DST` pairs separated by `;`; a path given to `open` (hence
    `torch.load`, `json.load(open(...))`), `os.path.exists`, `isfile`, `isdir` or
    `os.listdir` that is SRC or starts with `SRC/` has SRC replaced by DST (a relative DST
    is resolved against the working directory when the call is made). Nothing else is
    touched: the script's own strings keep the absolute path."""
    import builtins
    import io

    pairs = []
    for item in spec.split(";"):
        if "=>" in item:
            src, dst = item.split("=>", 1)
            pairs.append((src.rstrip("/"), dst.rstrip("/") or "."))

    def mapped(path):
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, str):
            for src, dst in pairs:
                if path == src or path.startswith(src + "/"):
                    return dst + path[len(src):]
        return path

    def redirect(function):
        def call(path, *args, **kwargs):
            return function(mapped(path), *args, **kwargs)

        call.__wrapped__ = function
        return call

    builtins.open = io.open = redirect(builtins.open)
    for name in ("exists", "isfile", "isdir"):
        setattr(os.path, name, redirect(getattr(os.path, name)))
    os.listdir = redirect(os.listdir)
