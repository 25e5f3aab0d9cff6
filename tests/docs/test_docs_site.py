"""The manual builds as a site, and keeps its shape: `mkdocs build --strict` passes (a
broken link or anchor, a page missing from the nav, fails it), the nav lists every page,
tables hold no paragraph-sized cells, the README stays short, and dated measurements
stay out of the manual (they belong to CONTRIBUTING.md)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
MANUAL = [ROOT / "README.md", *PAGES]


def nav_pages(nav: object) -> list[str]:
    """The page paths a mkdocs `nav` lists, at any depth."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def test_nav_lists_every_page_once() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == sorted(str(p.relative_to(DOCS)) for p in PAGES)


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (the docs extra: pip install '.[docs]')")
def test_site_builds_strict_without_warnings(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"})
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    assert not re.search(r"^(WARNING|ERROR)\b", said, re.M), said
    assert (tmp_path / "site" / "index.html").is_file()
    for page in PAGES:  # every page rendered where the nav points
        built = tmp_path / "site" / page.relative_to(DOCS).with_suffix("")
        assert (built / "index.html").is_file() or page.name == "index.md", built


def table_cells(text: str) -> list[str]:
    """The cells of the Markdown tables of a page (code blocks left out)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [cell.strip() for line in text.splitlines() if line.startswith("|")
            for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_table_cells_are_short(page: Path) -> None:
    long = [cell[:80] for cell in table_cells(page.read_text(encoding="utf-8"))
            if len(cell) > 1000]
    assert not long, f"{page.name}: write these cells as a list or prose: {long}"


def test_readme_is_a_newcomers_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the rest to docs/"
    for page in ("docs/convert.md", "docs/launch.md", "docs/config.md", "CONTRIBUTING.md"):
        assert any(f"({page})" in line for line in lines), f"README.md links no {page}"


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dated_measurement_in_the_manual(page: Path) -> None:
    dated = re.findall(r".{0,40}\b20\d\d-\d\d-\d\d\b.{0,40}", page.read_text(encoding="utf-8"))
    assert not dated, f"{page.name}: dated figures go to CONTRIBUTING.md: {dated}"


@pytest.mark.parametrize("page", ["README.md", "docs/check.md"])
def test_the_check_rule_tables_are_the_registry_s(page: str) -> None:
    """README's and the check page's rule tables are what `python -m distrun.check.rules`
    prints (made from distrun/check/rules.py): a rule added there shows here."""
    from distrun.check.rules import BEGIN, END, markdown

    text = (ROOT / page).read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, page
    table = text[text.index(BEGIN):text.index(END) + len(END)]
    assert table == markdown(), f"{page}: run `python -m distrun.check.rules` and paste it"
