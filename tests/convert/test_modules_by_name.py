"""Modules a project imports by name (`importlib.import_module(TABLE[args.model])`) are
read with it: the strings of its modules that name a module of the project's folder."""

from __future__ import annotations

from pathlib import Path

from distrun.convert.project import find_modules


def _names(entry: Path) -> set[str]:
    return {name for _, name in find_modules(entry)}


def test_a_module_named_in_a_table_for_importlib_is_read(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models/__init__.py").write_text("")
    (tmp_path / "models/ranker.py").write_text("x = 1\n")
    (tmp_path / "model.py").write_text("y = 2\n")  # "model.pt" names a file, not this
    (tmp_path / "table.py").write_text('MODELS = {"r": "models.ranker"}\n'
                                       'OUT = "model.pt"\nDATA = "data.csv"\n')
    entry = tmp_path / "train.py"
    entry.write_text("import importlib\nfrom table import MODELS\n"
                     "m = importlib.import_module(MODELS['r'])\n")
    assert _names(entry) == {"train", "table", "models", "models.ranker"}


def test_without_importlib_a_string_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models/__init__.py").write_text("")
    (tmp_path / "models/ranker.py").write_text("x = 1\n")
    entry = tmp_path / "train.py"
    entry.write_text('NAME = "models.ranker"\nprint(NAME)\n')
    assert _names(entry) == {"train"}
