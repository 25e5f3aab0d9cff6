"""The projects harness by hand: `python -m tests.projects [--all] [NAME...] [--keep] [-v]`
(from the repository root): a table of the projects run, their result and their steps'
times (see tests/projects/README.md)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from tests.projects.harness import (
    Outcome,
    descriptor_problems,
    load,
    materialize,
    names,
    run_all_steps,
)


def _status(out: Outcome) -> str:
    if out.passed:
        return "passes"
    first = out.failure().splitlines()
    return first[0] if first else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the real-projects corpus end to end.")
    parser.add_argument("names", nargs="*", help="projects (default with --all: every one)")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each failure's output and the conversion report")
    parser.add_argument("--materialize", action="store_true",
                        help="write NAME's upstream files from a clone (--git-dir) and stop")
    parser.add_argument("--git-dir", type=Path, help="the repository's .git (--materialize)")
    args = parser.parse_args(argv)
    if args.materialize:
        if len(args.names) != 1 or args.git_dir is None:
            parser.error("--materialize takes one NAME and --git-dir")
        problems = materialize(load(args.names[0]), args.git_dir)
        print("\n".join(problems) or f"{args.names[0]}: upstream files written, sha256 equal")
        return 1 if problems else 0
    chosen = names() if args.all or not args.names else args.names
    rows = []
    for name in chosen:
        project = load(name)
        problems = descriptor_problems(project)
        tmp = Path(tempfile.mkdtemp(prefix=f"distrun-project-{name}-"))
        try:
            out = run_all_steps(project, tmp)
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
        total = sum(out.seconds.values())
        expected = project.today["status"]
        rows.append((name, "exact" if project.exact else "not exact", _status(out),
                     expected, f"{total:.1f}s",
                     " ".join(f"{k}={v:.1f}" for k, v in out.seconds.items())))
        if problems:
            rows.append((name, "descriptor:", "; ".join(problems), "", "", ""))
        if args.verbose:
            if out.convert is not None:
                print(f"== {name}: conversion report\n{out.convert.stderr}{out.convert.stdout}")
            if not out.passed:
                print(f"== {name}: {out.failure()}")
            elif out.comparison is not None:
                print(f"== {name}: {out.comparison}")
        if args.keep:
            print(f"{name}: run folder kept in {tmp}")
    widths = [max(len(str(r[i])) for r in rows) for i in range(6)] if rows else []
    header = ("project", "exact", "result", "expected", "time", "steps (s)")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    for row in (header, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
