"""Before/after fixtures: tests/convert/fixtures/<rule>/<case>.py is converted and must
give <case>.out.py exactly, with the report <case>.report (one `line: rule: message`
per change or finding) and the files written beside it (<case>.ds_config.json).
Reviewers read a rewrite as a diff of real code.

Regenerate after an intended change with DISTRUN_UPDATE_FIXTURES=1, then review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrun.cli.render import report_text
from distrun.convert import ConvertOptions, convert_source
from distrun.convert.context import Transform
from distrun.convert.targets import own_transforms, parse_words
from distrun.convert.transforms import PIPELINE

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(
    p for p in FIXTURES.glob("*/*.py") if not p.name.endswith(".out.py")
)
UPDATE = os.environ.get("DISTRUN_UPDATE_FIXTURES") == "1"


def options_of(case: Path) -> ConvertOptions:
    """A fixture's first line may say `# distrun-options: --amp fp16 --sync-bn --scale-lr`:
    the options as `distrun convert` takes them on its command line."""
    first = case.read_text().splitlines()[0]
    words = first.split(":", 1)[1].split() if first.startswith("# distrun-options:") else []
    return parse_words(words)


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_fixture_converts_to_expected_output(case: Path) -> None:
    result = convert_source(case.read_text(), case.name, options_of(case))
    expected_out = case.with_suffix(".out.py")
    expected_report = case.with_suffix(".report")
    report = report_text(result, case.name) + "\n"
    if UPDATE:
        expected_out.write_text(result.output)
        expected_report.write_text(report)
    assert result.output == expected_out.read_text()
    assert report == expected_report.read_text()
    for name, text in result.files.items():  # golden files written beside the output
        golden = case.with_suffix(f".{name}")
        if UPDATE:
            golden.write_text(text)
        assert text == golden.read_text(), name


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_fixture_output_compiles_and_is_stable(case: Path) -> None:
    result = convert_source(case.read_text(), case.name, options_of(case))
    assert result.changed
    compile(result.output, case.name, "exec")
    again = convert_source(result.output, case.name)
    assert again.output == result.output
    assert again.status == "already-distributed"
    assert "distrun" not in "".join(
        line for line in result.output.splitlines() if line.startswith(("import", "from"))
    )


def test_every_transform_has_fixtures() -> None:
    """Each module of the pipeline, and each target, has a folder of fixtures named
    after it."""
    folders = {p.parent.name for p in CASES}
    modules = {t.run.__module__.rsplit(".", 1)[-1] for t in PIPELINE if isinstance(t, Transform)}
    targets = {name for name, _ in own_transforms()}
    assert (modules | targets) - folders == set()


def test_fixture_options_are_read_as_the_command_line_reads_them() -> None:
    assert parse_words(["--eval", "shard", "--to", "accelerate", "--sync-bn"]) == ConvertOptions(
        target="accelerate", sync_bn=True, eval_shard=True)
    with pytest.raises(ValueError, match="--amp takes one of"):
        parse_words(["--amp", "fp8"])
    with pytest.raises(ValueError, match="unknown convert option"):
        parse_words(["--eval-shard"])
