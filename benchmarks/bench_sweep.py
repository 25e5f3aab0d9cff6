"""Sweep `convert_source` over every `.py` file of the installed site-packages.

Real code in every style (torch, accelerate, libcst, numpy, sympy, pytest, ...) goes
through the converter, and what must always hold is checked for each file (see
tests/hardening/sweep.py): no exception but a documented refusal, every output
compiles, converting the output again changes nothing, an unconverted file comes back
byte-identical. Files that do not decode or do not compile as they are are skipped
and counted.

Prints the files per second, the count of each outcome (converted, already
distributed, nothing to do, unsupported, refused, skipped), the slowest files, and
every broken rule with the file that broke it.

Run:  .venv/bin/python benchmarks/bench_sweep.py [ROOT ...] [--every N] [--variant both]
      (default ROOT: the site-packages of the interpreter running it)

Exit status: 0 when every file holds; 1 on any crash, output that does not compile,
or output that is not a fixed point.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.hardening

from tests.hardening.sweep import (  # noqa: E402
    OPTION_SETS,
    Outcome,
    check_file,
    python_files,
    site_packages,
)

ORDER = ("converted", "already-distributed", "nothing-to-do", "unsupported", "refused",
         "skipped-not-compilable", "crashed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", type=Path,
                        help="folders to sweep (default: this interpreter's site-packages)")
    parser.add_argument("--every", type=int, default=1,
                        help="take every Nth file of the sorted list (default: all)")
    parser.add_argument("--slowest", type=int, default=5, help="how many slowest files to list")
    parser.add_argument("--variant", choices=("plain", "graft", "both"), default="both",
                        help="each file as it is, with a training loop appended, or both")
    parser.add_argument("--progress", action="store_true",
                        help="print each file's outcome as it goes")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error("--every must be at least 1")

    roots = args.roots or [site_packages()]
    files = python_files(roots)[::args.every]
    print(f"sweep: {len(files)} files under {', '.join(map(str, roots))}, "
          f"Python {sys.version.split()[0]}")
    variants = ["plain", "graft"] if args.variant == "both" else [args.variant]
    problems = 0
    for variant in variants:
        problems += sweep(files, variant, args.slowest, args.progress)
    print(f"\n{problems} problem(s) in all")
    return 1 if problems else 0


def sweep(files: list[Path], variant: str, slowest: int, progress: bool) -> int:
    """One pass over `files`; prints the figures and every problem; returns the count."""
    print(f"\n=== {variant}: " + ("each file as it is, default options" if variant == "plain" else
          "each file with a small training loop appended (every rewrite meets its code), "
          f"the options turning through {len(OPTION_SETS)} sets"))
    outcomes: list[Outcome] = []
    start = time.perf_counter()
    for index, path in enumerate(files):
        if variant == "plain":
            outcome = check_file(path)
        else:
            outcome = check_file(path, OPTION_SETS[index % len(OPTION_SETS)], graft=True)
        outcomes.append(outcome)
        if progress or outcome.problem is not None:
            mark = "PROBLEM" if outcome.problem else outcome.status
            print(f"  {mark}: {path} ({outcome.seconds:.2f} s)", flush=True)
    wall = time.perf_counter() - start

    counts = Counter(o.status for o in outcomes)
    print(f"{len(outcomes)} files in {wall:.1f} s: {len(outcomes) / wall:.1f} files/s "
          f"({sum(o.seconds for o in outcomes):.1f} s inside convert_source)")
    for status in ORDER:
        print(f"  {status:<24} {counts[status]:>6}")

    print(f"slowest {slowest} (both passes of convert_source):")
    for outcome in sorted(outcomes, key=lambda o: o.seconds, reverse=True)[:slowest]:
        lines = outcome.path.read_bytes().count(b"\n")
        print(f"  {outcome.seconds:7.2f} s  {lines:>6} lines  {outcome.status:<20} "
              f"{outcome.path}")

    for outcome in outcomes:
        if outcome.status == "refused":
            print(f"  refused (a documented user error): {outcome.message}")

    problems = [o for o in outcomes if o.problem is not None]
    print(f"{len(problems)} problem(s)")
    for outcome in problems:
        print(f"\n== {outcome.path} [{variant}, {outcome.status}]\n{outcome.problem}")
    return len(problems)

if __name__ == "__main__":
    sys.exit(main())
