"""Run a command while every core is kept busy: `python tests/under_load.py [-n N] -- CMD...`.

`make test-loaded` runs the whole test suite this way, to check that no test depends on
an idle machine (a test must wait for events, never for a fixed time). N busy loops
(default: one per core) start before the command and end when it ends, however it ends:
its exit, Ctrl-C, or this process being killed (each loop gets SIGKILL when its parent
dies). Prints the command's duration and the load averages at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

# A loop that ignores Ctrl-C (it goes to the whole terminal group): this script ends it.
BUSY = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--loops", type=int, default=os.cpu_count() or 1,
                        help="busy loops to run (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    loops = [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=_die_with_parent)
             for _ in range(args.loops)]
    started = time.monotonic()
    code = 130
    try:
        code = subprocess.call(command)
    except KeyboardInterrupt:
        pass
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    minutes, seconds = divmod(time.monotonic() - started, 60)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"under_load: {args.loops} busy loop(s); `{' '.join(command)}` exit {code} after "
          f"{int(minutes)} min {seconds:.0f} s; load average {load}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
