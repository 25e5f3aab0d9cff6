"""Before/after fixtures: tests/convert/fixtures/<rule>/<case>.py is converted and must
give <case>.out.py exactly, with the report <case>.report (one `line: rule: message`
per change or finding). Reviewers read a rewrite as a diff of real code.

Regenerate after an intended change with DISTRUN_UPDATE_FIXTURES=1, then review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrun.cli.render import report_text
from distrun.convert import ConvertOptions, convert_source

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(
    p for p in FIXTURES.glob("*/*.py") if not p.name.endswith(".out.py")
)
UPDATE = os.environ.get("DISTRUN_UPDATE_FIXTURES") == "1"


def options_of(case: Path) -> ConvertOptions:
    """A fixture's first line may say `# distrun-options: --amp fp16 --sync-bn --scale-lr`."""
    first = case.read_text().splitlines()[0]
    words = first.split(":", 1)[1].split() if first.startswith("# distrun-options:") else []
    amp = words[words.index("--amp") + 1] if "--amp" in words else "keep"
    target = words[words.index("--to") + 1] if "--to" in words else "ddp"
    return ConvertOptions(target=target, amp=amp,  # type: ignore[arg-type]
                          sync_bn="--sync-bn" in words, scale_lr="--scale-lr" in words,
                          grad_accum_no_sync="--grad-accum-no-sync" in words,
                          eval_shard="--eval-shard" in words)


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


def test_every_rule_folder_has_a_fixture() -> None:
    folders = {p.parent.name for p in CASES}
    assert {"device", "model", "data", "output", "checkpoint", "setup", "hazards", "amp",
            "scaling", "accelerate"} <= folders


def test_every_transform_has_fixtures() -> None:
    """Each module of the pipeline has a folder of fixtures named after it."""
    from distrun.convert.transforms import PIPELINE

    folders = {p.parent.name for p in CASES}
    modules = {t.run.__module__.rsplit(".", 1)[-1] for t in PIPELINE}
    assert modules - folders == set()
