"""Benchmark the start-up time of the `distrun` command line.

Times, as subprocesses, the best of N wall-clock runs of:

* `python -m distrun --help` and the console script `distrun --help` (if installed),
* `python -m distrun convert --help` (and the console script's),
* `python -c "import torch"`, the yardstick, and `python -c pass`, the interpreter floor,

then prints the ratio help time / import-torch time (goal: at most 0.10), and checks
with `python -X importtime` that `distrun --help` and `distrun convert --help` import
neither torch, libcst nor yaml.

Run:  .venv/bin/python benchmarks/bench_startup.py [--repeat 5]

Exit status: 0 (it is a report, goals missed or not), 1 if one of the commands fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RATIO_GOAL = 0.10
HEAVY = ("torch", "libcst", "yaml")


class CommandFailed(Exception):
    pass


def run_once(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace").strip()
        raise CommandFailed(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{stderr}")
    return elapsed


def best_of(cmd: list[str], repeat: int) -> float:
    run_once(cmd)  # warm-up: file-system cache and .pyc files
    return min(run_once(cmd) for _ in range(repeat))


def console_script() -> Path | None:
    """The `distrun` script next to the running interpreter, else the repo's venv one."""
    for candidate in (Path(sys.executable).parent / "distrun", REPO / ".venv" / "bin" / "distrun"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(cmd_args: list[str]) -> list[str]:
    """Names of all modules imported by `python -X importtime -m distrun ARGS`."""
    cmd = [sys.executable, "-X", "importtime", "-m", "distrun", *cmd_args]
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise CommandFailed(f"`{' '.join(cmd)}` exited {proc.returncode}")
    modules = []
    for line in proc.stderr.decode(errors="replace").splitlines():
        # "import time:       123 |        456 |     package.module"
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                modules.append(name)
    return modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command; the best counts")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    py = sys.executable
    script = console_script()
    commands: list[tuple[str, list[str]]] = [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -m distrun --help", [py, "-m", "distrun", "--help"]),
    ]
    if script is not None:
        commands.append(("distrun --help (console script)", [str(script), "--help"]))
    commands.append(
        ("python -m distrun convert --help", [py, "-m", "distrun", "convert", "--help"]))
    if script is not None:
        commands.append(
            ("distrun convert --help (console script)", [str(script), "convert", "--help"]))
    commands.append(('python -c "import torch"', [py, "-c", "import torch"]))

    print(f"start-up benchmark: best of {args.repeat} run(s) per command, wall clock, "
          f"interpreter {py}")
    if script is None:
        print("(no `distrun` console script found next to the interpreter: skipped)")
    width = max(len(label) for label, _ in commands)
    header = f"{'command':<{width}} {'seconds':>9} {'/ torch':>8}"
    times: dict[str, float] = {}
    try:
        for label, cmd in commands:
            times[label] = best_of(cmd, args.repeat)
    except CommandFailed as err:
        print(f"FAILED: {err}")
        return 1
    torch_time = times['python -c "import torch"']
    print(header)
    print("-" * len(header))
    for label, _ in commands:
        print(f"{label:<{width}} {times[label]:>9.3f} {times[label] / torch_time:>8.3f}")

    print()
    for label, _ in commands:
        if "--help" in label:
            ratio = times[label] / torch_time
            verdict = "MET" if ratio <= RATIO_GOAL else "MISSED"
            print(f"goal: {label} / import torch <= {RATIO_GOAL:.2f}: {ratio:.3f} -> {verdict}")

    print()
    for cmd_args in (["--help"], ["convert", "--help"]):
        try:
            modules = imported_modules(cmd_args)
        except CommandFailed as err:
            print(f"FAILED: {err}")
            return 1
        shown = "python -X importtime -m distrun " + " ".join(cmd_args)
        found = {
            heavy: sum(1 for m in modules if m == heavy or m.startswith(heavy + "."))
            for heavy in HEAVY
        }
        heavy_seen = [f"{name} ({count} modules)" for name, count in found.items() if count]
        verdict = "MISSED: imports " + ", ".join(heavy_seen) if heavy_seen else "MET"
        print(f"goal: `{shown}` imports none of {', '.join(HEAVY)} "
              f"({len(modules)} modules imported): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
