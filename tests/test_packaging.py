"""pyproject.toml lists packages explicitly (templates/ ships as distrun.templates):
a new subpackage must be listed there too, or the wheel would lack it."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "distrun").rglob("__init__.py")
    }
    assert found | {"distrun.templates"} == listed
    # a folder of modules without __init__.py is a namespace package: it imports from a
    # checkout, but setuptools leaves it out of the wheel
    folders = {p.parent for p in (ROOT / "distrun").rglob("*.py")}
    assert [f for f in folders if not (f / "__init__.py").exists()] == []
    assert config["package-dir"]["distrun.templates"] == "templates"
    assert (ROOT / "templates" / "__init__.py").exists()
