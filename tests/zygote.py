"""Runs many scripts, each in a fresh process forked from one that imported torch once.

`python tests/zygote.py single SPEC` or, under a launcher, `distrun launch
--nproc-per-node 2 --no-check tests/zygote.py ranked SPEC` (each rank a zygote). SPEC is
a JSON file: {"timeout": seconds, "cases": [{"cwd", "script", "args", "env", "out"}]}.
This process imports torch, torch.distributed and torch._dynamo (torch imports the last
at the first optimizer step: about a second of every process that trains), drawing no
random number; then, case by case, it forks a child that runs the case's script as
`python SCRIPT ARGS` would, in its own `__main__`, its stdout and stderr in files of the
case's `out` folder (TAG.stdout, TAG.stderr; TAG: `single`, or `rank<RANK>`), and writes
the child's exit code to TAG.exit ("timed out after N s" for a child it killed).

Ranked: each case gets a rendezvous of its own (a script's `init_process_group` in the
launch's store would meet the keys of the previous case): rank 0's child serves a new
TCPStore on a free port and publishes the port through the launch's store; every rank's
child points MASTER_PORT at it, as a client (TORCHELASTIC_USE_AGENT_STORE).

Not a fresh interpreter in every respect: torch and its dependencies are imported before
the script runs (a script that sets torch's environment variables before importing it
finds it imported), and PYTHONPATH is applied by hand (its entries after the script's
folder, a `sitecustomize` found there imported).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch._dynamo  # noqa: F401 (imported once here, not in every case)
import torch.distributed as dist

from distrun.check import boot  # runs a script in a fresh __main__ (its probe unused)

RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "TORCHELASTIC_USE_AGENT_STORE")
_KEPT: list[object] = []  # rank 0's store of the case: alive while the script runs
_CHILD: list[int] = []


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("single", "ranked"):
        print("usage: zygote.py single|ranked SPEC", file=sys.stderr)
        return 2
    mode, spec = argv[0], json.loads(open(argv[1]).read())
    signal.signal(signal.SIGTERM, _stop)
    tag = "single" if mode == "single" else f"rank{os.environ['RANK']}"
    for index, case in enumerate(spec["cases"]):
        started = time.monotonic()
        outcome = _run(mode, index, case, tag, float(spec.get("timeout", 120)))
        with open(os.path.join(case["out"], f"{tag}.exit"), "w") as kept:
            kept.write(outcome)
        print(f"zygote {tag}: {case['out']}: {outcome} ({time.monotonic() - started:.1f} s)",
              flush=True)
    return 0


def _stop(signum: int, frame: object) -> None:
    """Stopped by the launcher: the running case's processes go too."""
    for pid in _CHILD:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(128 + signum)


def _run(mode: str, index: int, case: dict, tag: str, timeout: float) -> str:
    """The case run in a forked child: its exit code, or why it has none."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os._exit(_child(mode, index, case, tag, timeout))
    _CHILD[:] = [pid]
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            return f"timed out after {timeout:.0f} s"
        time.sleep(0.05)
    _CHILD.clear()
    try:
        os.killpg(pid, signal.SIGKILL)  # what the script left running
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return str(os.WEXITSTATUS(status))


def _child(mode: str, index: int, case: dict, tag: str, timeout: float) -> int:
    """In the forked child: the case's folder, environment and output files, then the
    script as `python SCRIPT ARGS` runs it; the exit code it would end with."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        out = case["out"]
        for fd, name in ((1, "stdout"), (2, "stderr")):
            stream = os.open(os.path.join(out, f"{tag}.{name}"),
                             os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(stream, fd)
            os.close(stream)
        os.chdir(case["cwd"])
        if mode == "single":
            for name in RANK_VARS:
                os.environ.pop(name, None)
        os.environ.update({"PYTHONUNBUFFERED": "1", **case.get("env", {})})
        _fresh_generators()
        if mode == "ranked":
            _rendezvous(index, timeout)
        _python_path()
    except BaseException:  # noqa: BLE001 (said in the case's stderr, not the zygote's)
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    code = _script(case["script"], case.get("args", []))
    if mode == "ranked":
        _leave(index)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return code


def _script(script: str, args: list[str]) -> int:
    """The script's run as the interpreter ends it: its SystemExit's code, 1 with the
    traceback for an exception; then atexit's functions and the threads it waits for."""
    import atexit
    import threading

    code = 0
    try:
        boot._run_file(script, args)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException as err:  # noqa: BLE001 (the script's own error)
        tb = err.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename in boot._OURS
                                  or tb.tb_frame.f_code.co_filename == __file__):
            tb = tb.tb_next
        traceback.print_exception(type(err), err, tb)
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _fresh_generators() -> None:
    """torch's and numpy's global generators seeded from the OS, as a new process seeds
    them, not the zygote's copies (never drawn from: the imports draw nothing); Python's
    `random` reseeds itself after a fork."""
    torch.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _python_path() -> None:
    """PYTHONPATH as the interpreter applies it at start-up: after the script's folder
    (boot sets sys.path[0] to it), and a `sitecustomize` found there imported."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not entries:
        return
    sys.path[1:1] = [os.path.abspath(p) for p in entries]
    if any(os.path.exists(os.path.join(p, "sitecustomize.py")) for p in entries):
        import importlib

        sys.modules.pop("sitecustomize", None)
        importlib.import_module("sitecustomize")


def _rendezvous(index: int, timeout: float) -> None:
    """The case's own store: rank 0 serves it on a free port and publishes the port
    under a key of the case in the launch's store; every rank points MASTER_PORT at it."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host = os.environ["MASTER_ADDR"]
    wait = timedelta(seconds=timeout)
    agent = dist.TCPStore(host, int(os.environ["MASTER_PORT"]), is_master=False, timeout=wait)
    key = f"zygote/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{index}/port"
    if rank == 0:
        store = dist.TCPStore(host, 0, world_size=world, is_master=True,
                              wait_for_workers=False, timeout=wait)
        _KEPT.append(store)
        agent.set(key, str(store.port))
        port = store.port
    else:
        port = int(agent.get(key).decode())
    del agent
    os.environ["MASTER_PORT"] = str(port)
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"


def _leave(index: int) -> None:
    """Rank 0's store stays up until every other rank's script has ended."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        if rank == 0:
            _KEPT[0].wait([f"zygote/done/{r}" for r in range(1, world)],  # type: ignore
                          timedelta(seconds=30))
        else:
            dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timedelta(seconds=10)
                          ).set(f"zygote/done/{rank}", "1")
    except Exception:  # noqa: BLE001 (the other rank gone: nothing to wait for)
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
