"""A worker of `distrun launch --check`: `python boot.py SCRIPT ARGS...` (or `-m MODULE ARGS`).

The launcher (torchrun, accelerate) starts this file in place of the user's script. It
sets `sys.path` and `sys.argv` as `python SCRIPT ARGS` (or `python -m MODULE ARGS`) would,
arranges for the probe (probe.py) to be installed the moment the script imports torch, and
runs the script's code in a fresh `__main__` module, as the interpreter does. The script
itself is not changed.

Imports only the standard library before the script runs: a script that never imports
torch runs exactly as it would alone.
"""

from __future__ import annotations

import builtins
import faulthandler
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import signal
import sys
import threading
from collections.abc import Sequence
from types import ModuleType

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_KEPT: list[ModuleType] = []
_KEPT_FILES: list[object] = []
_OURS = {os.path.abspath(__file__), __file__, "<frozen runpy>", runpy.__file__}


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `torch` is first imported, lets the other finders find
    it and has the probe installed right after torch's own `__init__` has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_torch = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_torch(module)
            _install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install() -> None:
    try:
        from distrun.check import probe
    except Exception as err:  # noqa: BLE001 (another interpreter, a broken install...)
        print(f"distrun: check: the probe could not be loaded in this rank ({type(err).__name__}: "
              f"{err}); this rank runs unchecked", file=sys.stderr)
        return
    probe.install()


STACKS_SIGNAL = signal.SIGUSR2  # distrun asks a rank where it waits (hang reports)


def _stack_dumps() -> None:
    """On STACKS_SIGNAL, the stacks of every thread go to `stacks<RANK>.txt` in the check
    folder (faulthandler writes them from its C handler: a rank blocked inside a collective
    answers too); `stacks<RANK>.pid` names the process to ask. A signal handler of the
    script's own is kept (chained)."""
    folder, rank = os.environ.get("DISTRUN_CHECK_DIR"), os.environ.get("RANK")
    if not folder or rank is None:
        return
    try:
        stream = open(os.path.join(folder, f"stacks{rank}.txt"), "a")  # noqa: SIM115
        chain = signal.getsignal(STACKS_SIGNAL) not in (signal.SIG_DFL, None)
        faulthandler.register(STACKS_SIGNAL, file=stream, all_threads=True, chain=chain)
        with open(os.path.join(folder, f"stacks{rank}.pid"), "w") as pid:
            pid.write(str(os.getpid()))
        _KEPT_FILES.append(stream)
    except (OSError, ValueError, RuntimeError):
        pass  # no hang report for this rank; the job runs as it would


def _recorder_dumps() -> None:
    """A thread blocked on `fr<RANK>.fifo` in the check folder: each byte distrun writes
    there dumps PyTorch's Flight Recorder into the dump folder (check/flight.py). It runs
    while the main thread waits inside a collective (which releases the GIL)."""
    folder, rank = os.environ.get("DISTRUN_CHECK_DIR"), os.environ.get("RANK")
    prefix = os.environ.get("DISTRUN_FR_PREFIX")
    if not folder or rank is None or not prefix:
        return
    fifo = os.path.join(folder, f"fr{rank}.fifo")
    try:
        os.mkfifo(fifo)
    except OSError:
        return  # no dumps for this rank; the job runs as it would

    def serve() -> None:
        while True:
            with open(fifo, "rb") as asked:  # blocks until distrun writes
                if not asked.read(1):
                    continue
            raw = _recorder_dump()
            if raw:
                with open(f"{prefix}{rank}.part", "wb") as out:
                    out.write(raw)
                os.replace(f"{prefix}{rank}.part", f"{prefix}{rank}")

    threading.Thread(target=serve, name="distrun-flight-recorder", daemon=True).start()


def _recorder_dump() -> bytes | None:
    """This rank's Flight Recorder, pickled: the first dump that holds entries. PyTorch
    2.13 keeps every backend's in one recorder (`_dump_fr_trace`); older ones keep NCCL's
    apart (`_dump_nccl_trace`; their `_dump_fr_trace` then has no NCCL entry: seen with
    2.11 on a GPU)."""
    import pickle

    c10d = getattr(getattr(sys.modules.get("torch"), "_C", None), "_distributed_c10d", None)
    first: bytes | None = None
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        dump = getattr(c10d, name, None)
        try:
            raw: bytes | None = dump() if dump is not None else None
            if raw and pickle.loads(raw).get("entries"):
                return raw
        except Exception:  # noqa: BLE001 (no process group yet, a build without it)
            raw = None
        first = first or raw
    return first


def main(argv: list[str]) -> None:
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        sys.exit("usage: boot.py SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    _stack_dumps()
    _recorder_dumps()
    if _PACKAGE_ROOT not in sys.path:
        sys.path.append(_PACKAGE_ROOT)  # last: the user's own modules come first
    if "torch" in sys.modules:
        _install()
    else:
        sys.meta_path.insert(0, _AfterTorch())
    try:
        if argv[0] == "-m":
            _run_module(argv[1], argv[2:])
        else:
            _run_file(argv[0], argv[1:])
    except Exception as err:  # the script's own error, shown as `python SCRIPT` shows it
        tb = err.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in _OURS:
            tb = tb.tb_next
        sys.excepthook(type(err), err, tb)
        sys.exit(1)


def _fresh_main() -> ModuleType:
    """A new, empty `__main__` module in sys.modules, as the interpreter makes for a
    script; it stays there to the end (atexit handlers, pickling and spawned processes
    find the script's names in it)."""
    module = ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    _KEPT.append(sys.modules["__main__"])  # this file's module: its functions still run
    sys.modules["__main__"] = module
    return module


def _run_file(script: str, args: list[str]) -> None:
    """`python SCRIPT ARGS`: sys.argv, sys.path[0] (the script's folder), then its code in
    `__main__`."""
    path = os.path.abspath(script)
    with open(path, "rb") as stream:
        code = compile(stream.read(), path, "exec", dont_inherit=True)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    module = _fresh_main()
    module.__file__ = path
    module.__cached__ = None  # type: ignore[attr-defined]
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    module.__spec__ = None
    exec(code, module.__dict__)


def _run_module(name: str, args: list[str]) -> None:
    """`python -m MODULE ARGS`, as the interpreter runs it (runpy's own entry for -m)."""
    sys.argv = [name, *args]
    sys.path[0] = os.getcwd()
    _fresh_main()
    runpy._run_module_as_main(name, alter_argv=True)  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1:])
