"""Real public training projects, converted and trained on 2 processes (see README.md).

One end-to-end test per project (marked `e2e`): the original on one process, the
conversion, the converted copy on 2 processes, the checkpoint comparison. Projects that
today's converter does not get right are marked `xfail(strict=True)` with the reason
recorded in their descriptor (`today:`), so the test fails (XPASS) the day they start
working and the descriptor must be updated.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.projects import harness

NAMES = harness.names()
NOTEBOOKS = [n for n in NAMES if harness.load(n).is_notebook]


def _marks(name: str) -> list[pytest.MarkDecorator]:
    today = harness.load(name).today
    if today["status"] == "xfail":
        # `strict: false` only for a failure that is a race between the ranks (pygat): it
        # shows in some runs, not all; every other xfail is strict
        strict = bool(today.get("strict", True))
        return [pytest.mark.xfail(strict=strict, reason=str(today["reason"]).strip())]
    return []


def test_corpus_is_big_enough() -> None:
    projects = [harness.load(n) for n in NAMES]
    assert len(projects) >= 12
    multi_file = [p for p in projects
                  if sum(f.endswith(".py") for f in p.spec["source"]["files"]) > 1]
    assert len(multi_file) >= 6


def _skip_without_upstream(project: harness.Project) -> None:
    if not project.upstream.exists() and (project.folder / ".gitignore").is_file():
        pytest.skip(f"{project.name}: upstream files not in this checkout (kept out of git: "
                    f"`python -m tests.projects --materialize {project.name} --git-dir "
                    f"CLONE/.git` writes them, sha256-checked)")


@pytest.mark.parametrize("name", NAMES)
def test_descriptor_is_complete_and_upstream_is_verbatim(name: str) -> None:
    """Every key is there, and every upstream file exists with its recorded sha256."""
    project = harness.load(name)
    _skip_without_upstream(project)
    assert harness.descriptor_problems(project) == []


def test_harness_notebook_extraction_keeps_python_drops_magics() -> None:
    """The harness's own extraction (independent of distrun's): magics and shell lines
    at a statement's start go, a `%` continuation line inside brackets stays."""
    cells = [
        {"cell_type": "markdown", "source": ["# a title\n", "%not code"]},
        {"cell_type": "code", "source": ["%matplotlib inline\n", "import os\n",
                                         "!pip install x\n", "x = ('%d'\n",
                                         "     % (1,))\n", "if x:\n", "    !ls\n"]},
        {"cell_type": "code", "source": "%%bash\necho hi\n"},
        {"cell_type": "code", "source": "%%time\ny = \"\"\"\n%s\n\"\"\" % 2\n"},
    ]
    script = harness.notebook_cells(json.dumps({"cells": cells}).encode())
    compile(script, "cells", "exec")
    lines = script.splitlines()
    assert "pass  # harness dropped: %matplotlib inline" in lines
    assert "pass  # harness dropped: !pip install x" in lines
    assert "    pass  # harness dropped: !ls" in lines
    assert "     % (1,))" in lines
    assert "%s" in lines  # inside a string
    assert "echo hi" not in script and "%not code" not in script
    assert 'y = """' in lines


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_cells_are_python(name: str) -> None:
    """What the original run of a notebook project executes compiles."""
    project = harness.load(name)
    _skip_without_upstream(project)
    script = harness.notebook_cells((project.upstream / project.entry).read_bytes())
    compile(script, project.single_script, "exec")


@pytest.mark.e2e
@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in NAMES])
def test_converted_project_trains_like_the_original(name: str, tmp_path: Path) -> None:
    project = harness.load(name)
    _skip_without_upstream(project)

    single = harness.run_single(project, tmp_path)
    assert single.returncode == 0, "original run failed:\n" + single.stdout[-3000:] \
        + single.stderr[-3000:]

    conv = harness.convert_project(project, tmp_path)
    assert conv.returncode == 0, "distrun convert failed:\n" + conv.stdout + conv.stderr
    assert harness.report_problems(project, conv) == [], conv.stdout + conv.stderr

    two = harness.run_two(project, tmp_path)
    assert two.returncode == 0, "2-process run failed:\n" + two.stdout[-3000:] \
        + two.stderr[-3000:]
    assert "no problem found" in two.stderr, two.stderr[-3000:]  # launch --check

    comparison = harness.compare(project, tmp_path)
    assert comparison.ok, str(comparison)
