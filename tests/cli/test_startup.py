"""CLI start-up: help, version and `python -m distrun` stay cheap and work."""

from __future__ import annotations

import json
import sys

import pytest

import distrun
from tests.conftest import ROOT, run_cmd
from tests.conftest import distrun as run_distrun

HEAVY = ("torch", "libcst", "yaml", "ray")

# Runs distrun.cli.main(ARGV) in a fresh interpreter, then reports (on a marker line)
# the exit code and which heavy modules ended up imported.
_PROBE = """
import json, sys
from distrun.cli import main
code = "no SystemExit"
try:
    main({argv!r})
except SystemExit as exc:
    code = exc.code
print("@@PROBE@@" + json.dumps({{
    "code": code,
    "loaded": {{name: name in sys.modules for name in {heavy!r}}},
}}))
"""


def _probe(argv: list[str]) -> tuple[dict, str]:
    proc = run_cmd([sys.executable, "-c", _PROBE.format(argv=argv, heavy=HEAVY)], cwd=ROOT)
    assert "Traceback" not in proc.stderr, proc.stderr
    marker = [line for line in proc.stdout.splitlines() if line.startswith("@@PROBE@@")]
    assert marker, f"probe printed no result\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    help_text = proc.stdout.replace(marker[-1], "")
    return json.loads(marker[-1].removeprefix("@@PROBE@@")), help_text


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["convert", "--help"], ["launch", "--help"]],
    ids=["root", "convert", "launch"],
)
def test_help_exits_0_without_importing_heavy_modules(argv: list[str]) -> None:
    result, help_text = _probe(argv)
    assert result["code"] in (0, None), result
    assert "Usage:" in help_text
    imported = [name for name, loaded in result["loaded"].items() if loaded]
    assert imported == [], f"`distrun {' '.join(argv)}` imported {imported}"


def test_convert_help_documents_the_options() -> None:
    _, help_text = _probe(["convert", "--help"])
    for option in ("--output", "--in-place", "--no-backup", "--diff", "--check", "--force",
                   "--report"):
        assert option in help_text, f"{option} missing from `distrun convert --help`"


def test_version_prints_the_package_version() -> None:
    result, text = _probe(["--version"])
    assert result["code"] in (0, None), result
    assert distrun.__version__ in text
    assert "distrun" in text


def test_python_dash_m_distrun_help() -> None:
    proc = run_distrun("--help", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "convert" in proc.stdout
    assert "launch" in proc.stdout
