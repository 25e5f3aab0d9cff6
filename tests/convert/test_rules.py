"""Rule ids: every change and finding carries one id registered once in
`distrun/convert/rules.py`; families, modules and fixture folders agree; the rule
reference page is the registry's."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from distrun.convert import rules, rules_page
from distrun.convert.analysis import Facts
from distrun.convert.edits import Plan
from distrun.convert.targets import TARGETS
from tests.conftest import ROOT

PACKAGE = ROOT / "distrun"
FIXTURES = ROOT / "tests" / "convert" / "fixtures"
NOT_TRANSFORMS = {"detect": "the gates of pipeline.py (transforms/detect.py)",
                  "notebook": "a notebook's cells (convert/notebook.py)",
                  "project": "a project's modules found together (convert/project.py)",
                  "verify": "checks of the converted text (convert/defined.py)"}
REPORTERS = {"change": 1, "finding": 1, "Finding": 1, "Change": 1, "refuse": 1}
# Records that carry ids to a shared reporter (targets/full_state.SaveWords): their fields.
ID_RECORDS = {"SaveWords": (0, 1)}


def ids_in_code() -> dict[str, list[str]]:
    """Every rule id the code passes to a report (file:line where), f-strings over the
    targets (`f"{ctx.target.name}.one_model"`) expanded to every target."""
    found: dict[str, list[str]] = {}
    for path in [*PACKAGE.joinpath("convert").rglob("*.py"), PACKAGE / "cli" / "convert.py",
                 *PACKAGE.joinpath("cli").glob("convert_*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            for field in ID_RECORDS.get(name, ()):
                given = node.args[field] if len(node.args) > field else None
                if isinstance(given, ast.Constant) and isinstance(given.value, str):
                    found.setdefault(given.value, []).append(where)
                else:
                    found.setdefault(f"<not a literal: {ast.dump(node)[:40]}>", []).append(where)
            index = REPORTERS.get(name)
            if index is None or len(node.args) <= index:
                continue
            arg = node.args[index]
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.setdefault(arg.value, []).append(where)
            elif isinstance(arg, ast.JoinedStr) and ast.unparse(arg).startswith(
                    "f'{ctx.target.name}."):
                rest = ast.unparse(arg)[len("f'{ctx.target.name}"):-1]
                for target in TARGETS:
                    found.setdefault(target + rest, []).append(where)
            elif isinstance(arg, ast.Call) and ast.unparse(arg.func) == "check":
                continue  # the reporters themselves, checking the id they are given
            elif isinstance(arg, ast.Attribute) and ast.unparse(arg).startswith("words.") \
                    and arg.attr.endswith("_rule"):
                continue  # an id a SaveWords record gives (counted where it is made)
            else:
                found.setdefault(f"<not a literal: {ast.unparse(arg)}>", []).append(where)
    return found


def test_every_id_the_code_reports_is_registered() -> None:
    unregistered = {i: w for i, w in ids_in_code().items() if i not in rules.RULES}
    # shared refusals expand over every target: only those that refuse count
    unregistered = {i: w for i, w in unregistered.items()
                    if not i.startswith(("ddp.", "accelerate."))
                    or not i.endswith(("one_model", "updated_by_hand"))}
    assert unregistered == {}


def test_every_registered_id_is_reported_somewhere_and_once_in_the_registry() -> None:
    used = set(ids_in_code())
    assert [r for r in rules.RULES if r not in used] == []
    ids = [rule_id for rule_id, _ in rules._RULES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


def test_ids_are_family_dot_rule_in_snake_case() -> None:
    for rule in rules.RULES.values():
        family, _, name = rule.id.partition(".")
        assert family.isidentifier() and name.isidentifier() and name.islower(), rule.id
        assert rule.summary.endswith(".") and len(rule.summary) < 200, rule.id


def test_families_modules_and_fixture_folders_agree() -> None:
    transforms = {p.stem for p in (PACKAGE / "convert" / "transforms").glob("*.py")}
    families = {rule_id.split(".")[0] for rule_id in rules.RULES}
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    for family in families:
        assert family in transforms or family in TARGETS or family in NOT_TRANSFORMS, family
        assert family in folders or family in NOT_TRANSFORMS, f"no fixtures/{family}/"
    assert folders - families == set(), "a fixture folder named after no rule family"


def test_an_unregistered_id_is_refused_where_it_is_reported() -> None:
    facts = Facts.build(cst.parse_module("x = 1\n"))
    plan = Plan(facts)
    with pytest.raises(KeyError, match="not registered"):
        plan.change(facts.calls[0] if facts.calls else facts.entry.module, "data.nope", "x")
    plan.change(facts.entry.module, "data.sampler", "registered")
    assert [c.rule for c in plan.report(facts.entry).changes] == ["data.sampler"]


def test_the_rule_reference_page_is_the_registry() -> None:
    page = ROOT / "docs" / "rules.md"
    assert page.read_text() == rules_page.markdown(), \
        "regenerate: python -m distrun.convert.rules_page > docs/rules.md"
    for rule_id in rules.RULES:
        assert f"`{rule_id}`" in page.read_text()
