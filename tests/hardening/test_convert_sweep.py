"""`convert_source` on real code nobody here wrote: a fixed sample of the installed
site-packages (torch, accelerate, libcst, numpy, sympy, ...), every Nth file by path.

Each file as it is (default options), and a second sample with a small training loop
appended and the options turning (so every rewrite meets real code). What must hold is
in tests/hardening/sweep.py: no exception but a documented refusal, output that
compiles, a fixed point, unconverted files byte-identical. benchmarks/bench_sweep.py
runs every file.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

import distrun.convert
from distrun.convert import convert_source
from distrun.errors import ConvertError
from tests.hardening.sweep import (
    OPTION_SETS,
    SKIPPED,
    TRAINING_TAIL,
    Outcome,
    check_file,
    check_text,
    every_nth,
    python_files,
    site_packages,
)


@cache
def all_files() -> list[Path]:
    """Every .py file of site-packages: walked once, when a test first needs it (never at
    collection, which every pytest run pays for)."""
    return python_files([site_packages()])


def plain() -> list[Path]:
    return every_nth(all_files(), 130)


def grafted() -> list[Path]:
    return every_nth(all_files(), 35, offset=7)


def _assert_holds(outcome: Outcome) -> None:
    assert outcome.problem is None, f"{outcome.path}: {outcome.problem}"


def _assert_all_hold(outcomes: list[Outcome]) -> None:
    """Every file is checked; the test fails listing each file where a rule broke."""
    broken = [f"{o.path.relative_to(site_packages())}: {o.problem}" for o in outcomes
              if o.problem is not None]
    assert not broken, f"{len(broken)} of {len(outcomes)} files:\n" + "\n".join(broken)


def test_real_files() -> None:
    _assert_all_hold([check_file(path) for path in plain()])


def test_real_files_with_a_training_loop() -> None:
    outcomes = [check_file(path, OPTION_SETS[index % len(OPTION_SETS)], graft=True)
                for index, path in enumerate(grafted())]
    skipped = [str(o.path) for o in outcomes if o.status == SKIPPED]
    assert not skipped, skipped
    _assert_all_hold(outcomes)


def test_the_sample_is_real_and_varied() -> None:
    """Thousands of files to draw from; the sample spans the big packages."""
    PLAIN, GRAFTED = plain(), grafted()
    assert len(all_files()) > 2000
    packages = Counter(p.relative_to(site_packages()).parts[0] for p in [*PLAIN, *GRAFTED])
    assert {"torch", "libcst", "accelerate", "numpy", "sympy"} <= set(packages), packages
    assert 150 <= len(PLAIN) + len(GRAFTED) <= 300


def test_files_that_do_not_compile_are_skipped_not_judged(tmp_path: Path) -> None:
    (tmp_path / "py2.py").write_text('print "x"\n')
    (tmp_path / "blob.py").write_bytes(b"\0\1\2")
    assert check_file(tmp_path / "py2.py").status == SKIPPED
    assert check_file(tmp_path / "blob.py").status == SKIPPED


# ------------------------------------------------------------- regressions the sweep found


def test_a_deeply_nested_expression_converts() -> None:
    """sympy/polys/numberfields/resolvent_lookup.py: sums of hundreds of terms nest deeper
    than LibCST could walk with the default recursion limit (a RecursionError escaped).
    Now it is converted on a thread with a deep stack, up to what Python compiles."""
    terms = " + ".join(f"x**{i % 7}" for i in range(800))
    source = f"x = 2\nvalue = {terms}\nprint(value)\n" + TRAINING_TAIL
    compile(source, "deep.py", "exec")
    limit, stack = sys.getrecursionlimit(), threading.stack_size()

    outcome = check_text(source, "deep.py")

    assert outcome.status == "converted"
    _assert_holds(outcome)
    assert (sys.getrecursionlimit(), threading.stack_size()) == (limit, stack)  # restored


def test_nesting_deeper_than_the_deep_stack_allows_is_a_clear_refusal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distrun.convert, "DEEP_RECURSION_LIMIT", 0)  # no deeper retry
    source = "value = " + " + ".join(["1"] * 800) + "\n" + TRAINING_TAIL

    with pytest.raises(ConvertError) as refused:
        convert_source(source, "deep.py")

    assert refused.value.message == "deep.py: nested too deeply to convert"
    assert refused.value.hint
