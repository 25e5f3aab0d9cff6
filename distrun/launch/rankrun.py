"""One worker of a job that DeepSpeed's launcher starts (`--launcher deepspeed`).

    python -m distrun.launch.rankrun [--folder=NAME] [--log-dir=DIR] -- SCRIPT ARGS...
                                                                 (or -- -m MODULE ...)

DeepSpeed's launcher shows its workers' output untagged and, when one fails, stops the
others and exits with its code: nothing says which rank failed or why. This wrapper runs
the worker (`python -u SCRIPT ARGS`) and gives distrun's runner what torchrun gives it:
each output line tagged `[default<LOCAL_RANK>]:`, the worker's standard error kept in
DIR/NAME/attempt_0/<LOCAL_RANK>/stderr.log (NAME: deepspeed unless given), and how it
ended in exit.json beside it. It also runs the one rank of a SLURM task (backends/task.py).
SIGTERM and SIGINT go on to the worker; the wrapper then ends as the worker did (its
exit code, or the same signal), so the launcher sees the worker's own end. Standard
library only: it starts in every worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, BinaryIO


def main(argv: list[str]) -> int:
    options = {"--log-dir": "", "--folder": "deepspeed"}
    while argv and argv[0].partition("=")[0] in options:
        name, _, value = argv[0].partition("=")
        options[name], argv = value, argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    log_dir = options["--log-dir"] or None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    folder = Path(log_dir, options["--folder"], "attempt_0", str(local)) if log_dir else None
    log: BinaryIO | None = None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / "stderr.log", "ab")  # noqa: SIM115 (closed at the end)
    child = subprocess.Popen([sys.executable, "-u", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    stopped: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopped.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    tag = f"[default{local}]:".encode()
    pumps = [threading.Thread(target=_pump, args=(src, dst, tag, copy), daemon=True)
             for src, dst, copy in ((child.stdout, sys.stdout.buffer, None),
                                    (child.stderr, sys.stderr.buffer, log))]
    for pump in pumps:
        pump.start()
    code = child.wait()
    for pump in pumps:
        pump.join(timeout=5)
    if log is not None:
        log.close()
    if folder is not None:
        record = {"rank": int(os.environ.get("RANK", local)), "local_rank": local,
                  "host": socket.gethostname(), "exit_code": code, "time": time.time(),
                  "stopped": bool(stopped)}
        (folder / "exit.json").write_text(json.dumps(record) + "\n")
    if code < 0:  # end by the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _pump(src: IO[bytes] | None, dst: BinaryIO, tag: bytes, copy: BinaryIO | None) -> None:
    assert src is not None
    for line in iter(src.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        try:
            dst.write(tag + line)
            dst.flush()
        except (BrokenPipeError, ValueError):
            pass  # the launcher went away: the worker keeps running to its end
        if copy is not None:
            copy.write(line)
            copy.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
