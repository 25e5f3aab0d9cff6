"""One rank of a `--launcher ray` job: the function each Ray Train worker runs.

Ray Train has already set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK,
MASTER_ADDR and MASTER_PORT, and made a process group. The script makes its own (a
converted script calls `init_process_group`, as under torchrun): Ray's group is
destroyed first, once the ranks have agreed on a fresh MASTER_PORT through it (the
store Ray made on the old port may still be listening). That leaves the script, and
any torchrun-style script, to run unchanged, with no change to what `distrun convert`
writes.

Then, as torchrun would: the job's environment (the user's --env, the check's
variables), OMP_NUM_THREADS (1, unless the user set it), the driver's working folder
(where it exists on this node), and the script (or `-m MODULE`, or the check's boot.py
in front of it) run in a fresh `__main__` module, its standard output and error tagged
`[default<RANK>]:` line by line, each stream ended by a line the driver waits for.
A script that fails prints its traceback, as `python SCRIPT` would, and the rank's
failure goes to Ray as a `RankFailed`.

Imports only the standard library (torch is already loaded: Ray Train imported it);
the script runs in Ray Train's training thread, not the worker's main thread.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
import threading
import traceback
from types import TracebackType
from typing import Any

# The last line of each of a rank's streams, with its exit code and host (ray_output.py
# reads it and drops it): "distrun: end of rank output: exit code 0 on HOST".
END_OF_OUTPUT = "distrun: end of rank output: exit code"
OUR_FILES = {os.path.abspath(__file__), runpy.__file__, "<frozen runpy>"}


class RankFailed(Exception):
    """A rank's script failed: its exit code, its host and the end of its error."""

    def __init__(self, rank: int, exit_code: int, host: str, error: str) -> None:
        super().__init__(rank, exit_code, host, error)
        self.rank, self.exit_code, self.host, self.error = rank, exit_code, host, error

    def __str__(self) -> str:
        return f"rank {self.rank} exited with code {self.exit_code}\n{self.error}"


def run_rank(config: dict[str, Any]) -> None:
    """Ray Train's train function: `config` holds `target` (the command line after
    `python`), `env`, `omp` (OMP_NUM_THREADS), `cwd` (the driver's folder) and
    `master_addr` (rank 0's address where the driver knows it, else None)."""
    rank = int(os.environ.get("RANK", "0"))
    os.environ.update(config["env"])
    os.environ["DISTRUN_CHECK_END"] = "raise"  # --check-steps ends the script, not the worker
    if os.environ.get("DISTRUN_CHECK_DIR"):  # on another node: the facts stay there
        os.makedirs(os.environ["DISTRUN_CHECK_DIR"], exist_ok=True)
    _threads(str(config["omp"]))
    _fresh_master_port(config.get("master_addr"))
    with _Tagged(rank) as tagged:
        _working_folder(str(config["cwd"]))
        code, error = _run(list(config["target"]))
        _finish_probe()
        tagged.exit_code = code
    if code != 0:
        raise RankFailed(rank, code, socket.gethostname(), error)


def _threads(omp: str) -> None:
    """OMP_NUM_THREADS as torchrun sets it; torch read the variable when Ray imported
    it, so its thread pool is set too."""
    os.environ["OMP_NUM_THREADS"] = omp
    torch = sys.modules.get("torch")
    if torch is not None and omp.isdigit() and int(omp) > 0:
        torch.set_num_threads(int(omp))


def _fresh_master_port(master_addr: str | None) -> None:
    """Ray's process group destroyed, after rank 0 has told every rank a port free on
    its node: the script's `init_process_group` meets there (at `master_addr`, where
    given: 127.0.0.1 on a local cluster)."""
    if master_addr:
        os.environ["MASTER_ADDR"] = master_addr
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    port = [_free_port(os.environ.get("MASTER_ADDR", "127.0.0.1"))
            if dist.get_rank() == 0 else 0]
    dist.broadcast_object_list(port, src=0)
    dist.barrier()
    dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(port[0])
    _undo_rank_prefix()


def _undo_rank_prefix() -> None:
    """torch's `init_process_group` wraps sys.excepthook to start each line with
    `[rankN]:`; Ray's group did, and the script's would again (`[rank1]: [rank1]: ...`):
    the hook from before Ray's group is put back."""
    hook = sys.excepthook
    code = getattr(hook, "__code__", None)
    if getattr(hook, "__name__", "") != "_distributed_excepthook" or code is None:
        return
    names, cells = code.co_freevars, getattr(hook, "__closure__", None) or ()
    if "old_hook" in names and len(cells) == len(names):
        sys.excepthook = cells[names.index("old_hook")].cell_contents


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _working_folder(cwd: str) -> None:
    """The driver's folder, as under torchrun (relative paths in the script and its
    arguments), where this node has it; else the folder Ray gave (a Ray job's
    working_dir, unpacked on each node)."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    else:
        print(f"distrun: ray: {cwd} is not on {socket.gethostname()}: rank "
              f"{os.environ.get('RANK')} runs in {os.getcwd()}", file=sys.stderr)


def _run(target: list[str]) -> tuple[int, str]:
    """`python TARGET...` in this process: its exit code, and its traceback (printed
    to standard error as the interpreter prints it) if it raised."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if target[0] == "-m":
            sys.argv = target[1:]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = target[:]
            sys.path.insert(0, os.path.dirname(os.path.realpath(target[0])))
            runpy.run_path(os.path.abspath(target[0]), run_name="__main__")
    except SystemExit as end:
        return _exit_code(end)
    except BaseException as err:  # noqa: BLE001 (the script's own error, shown as Python does)
        text = "".join(traceback.format_exception(type(err), err, _user_frames(err)))
        sys.stderr.write(text)
        return 1, text.strip()
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0, ""


def _exit_code(end: SystemExit) -> tuple[int, str]:
    """The exit code `sys.exit(code)` means (a message is printed, exit code 1)."""
    if end.code is None or isinstance(end.code, int):
        return int(end.code or 0), ""
    sys.stderr.write(f"{end.code}\n")
    return 1, str(end.code)


def _user_frames(err: BaseException) -> TracebackType | None:
    """The traceback from the first frame that is not this file's or runpy's."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in OUR_FILES:
        tb = tb.tb_next
    return tb


def _finish_probe() -> None:
    """The check's end-of-rank facts (the probe writes them at exit under torchrun; a Ray
    worker lives on after its script)."""
    probe = sys.modules.get("distrun.check.probe")
    if probe is not None:
        probe.finish()


class _Tagged:
    """File descriptors 1 and 2 through pipes while the script runs: each line written
    to them (by Python or by C code) goes on to the worker's own stream, tagged with
    the rank; at the end, the END_OF_OUTPUT line on each."""

    def __init__(self, rank: int) -> None:
        self.tag = f"[default{rank}]:".encode()
        self.exit_code = 1  # said in the END_OF_OUTPUT lines; set once the script ended
        self.saved: list[int] = []
        self.pumps: list[threading.Thread] = []

    def __enter__(self) -> _Tagged:
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            stream.flush()
            if hasattr(stream, "reconfigure"):  # each line as it is written
                stream.reconfigure(line_buffering=True)
            read, write = os.pipe()
            self.saved.append(os.dup(fd))
            os.dup2(write, fd)
            os.close(write)
            pump = threading.Thread(target=self._pump, args=(read, self.saved[-1]),
                                    daemon=True, name=f"distrun-tag-{fd}")
            pump.start()
            self.pumps.append(pump)
        return self

    def __exit__(self, *_exc: object) -> None:
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
            os.dup2(self.saved[fd - 1], fd)
        for pump in self.pumps:  # a forked child still holding a pipe: not waited for
            pump.join(timeout=5)
        end = f"{END_OF_OUTPUT} {self.exit_code} on {socket.gethostname()}\n".encode()
        for saved in self.saved:
            _write(saved, self.tag + end)
            os.close(saved)

    def _pump(self, read: int, out: int) -> None:
        with os.fdopen(read, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines:
                    _write(out, b"".join(self.tag + line + b"\n" for line in lines))
            if pending:
                _write(out, self.tag + pending + b"\n")


def _write(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            return
