"""Before/after fixtures of projects: tests/convert/fixtures/project/<case>/ holds the
project as given (`in/`), its entry (`entry`: a path relative to `in/`, a script or a
notebook), the files the conversion writes (`out/`: each changed module at its path, a
notebook's script as NAME_ddp.py beside it; a module left unchanged has no file there)
and the report (`report`, as `distrun convert` prints it, files named from the case's
folder). Converting the written project again changes nothing.

Regenerate after an intended change with DISTRUN_UPDATE_FIXTURES=1, then review the diff.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from distrun.cli.render import project_report_text
from distrun.convert.project import ProjectResult, convert_project

CASES = sorted(p for p in (Path(__file__).parent / "fixtures" / "project").iterdir()
               if (p / "entry").is_file())
UPDATE = os.environ.get("DISTRUN_UPDATE_FIXTURES") == "1"


def _convert(case: Path, monkeypatch: pytest.MonkeyPatch) -> ProjectResult:
    monkeypatch.chdir(case)
    return convert_project(f"in/{(case / 'entry').read_text().strip()}")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_project_converts_to_expected_files(case: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    project = _convert(case, monkeypatch)
    written = {f.source.out_rel: f.result.output for f in project.written}
    report = project_report_text(project, project.shown) + "\n"
    out = case / "out"
    if UPDATE:
        shutil.rmtree(out, ignore_errors=True)
        for rel, text in written.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
        (case / "report").write_text(report)
    expected = {p.relative_to(out).as_posix(): p.read_text()
                for p in out.rglob("*") if p.is_file()} if out.is_dir() else {}
    assert sorted(written) == sorted(expected)
    for rel, text in written.items():
        assert text == expected[rel], rel
        compile(text, rel, "exec")
    assert report == (case / "report").read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_converted_project_converts_to_itself(case: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The written files in place of the originals (a notebook's script as the entry):
    converting that project again changes no file."""
    project = _convert(case, monkeypatch)
    shutil.copytree(case / "in", tmp_path / "in")
    top = tmp_path / "in" / project.root.relative_to((case / "in").resolve())
    entry = top / project.entry.source.rel
    for f in project.written:
        (top / f.source.out_rel).write_text(f.result.output)
    if project.entry.source.cells is not None:
        entry = top / project.entry.source.out_rel
    again = convert_project(str(entry))
    assert len(again.files) == len(project.files)
    assert [f.source.rel for f in again.changed] == []
    assert again.entry.result.status == "already-distributed"
