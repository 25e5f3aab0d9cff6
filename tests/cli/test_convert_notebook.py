"""`distrun convert NOTEBOOK.ipynb`: the code cells as a converted script; magics and
shell lines commented out and reported by cell; the notebook never rewritten."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.cli.convert_helpers import assert_error, run, snapshot
from tests.conftest import run_cmd

CELLS = [
    ("markdown", "# A tiny model\n"),
    ("code", "%matplotlib inline\n!pip install torch\nimport torch\nimport torch.nn as nn\n"
             "from torch.utils.data import DataLoader, TensorDataset\n"),
    ("code", "torch.manual_seed(0)\n"
             "data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
             "loader = DataLoader(data, batch_size=64, shuffle=True)\n"
             "model = nn.Linear(4, 1)\n"
             "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"),
    ("code", "%%time\nfor epoch in range(3):\n    for x, y in loader:\n"
             "        loss = nn.functional.mse_loss(model(x), y)\n"
             "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
             "    print(epoch, loss.item())\n"),
    ("code", "%%bash\necho this is not Python\n"),
    ("code", "%time final = loss.item()\nmodel?\n"
             "import os\ntorch.save(model.state_dict(), os.environ.get('OUT', 'nb.pt'))"),
]


def write_notebook(path: Path) -> None:
    cells = [{"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
              **({"outputs": [], "execution_count": None} if kind == "code" else {})}
             for kind, text in CELLS]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}, indent=1))


@pytest.fixture
def nb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.ipynb"
    write_notebook(path)
    return path


def test_code_cells_become_a_converted_script(nb: Path) -> None:
    before = nb.read_bytes()
    result = run("convert", nb.name)
    assert result.exit_code == 0, result.output
    assert nb.read_bytes() == before  # the notebook is never rewritten
    script = (nb.parent / "train_ddp.py").read_text()
    compile(script, "train_ddp.py", "exec")
    assert "# %% [cell 1]" in script and "# %% [cell 5]" in script
    assert "# %matplotlib inline" in script and "# !pip install torch" in script
    assert "# %%bash" in script and "# echo this is not Python" in script
    assert "final = loss.item()" in script and "# model?" in script
    assert "ddp_model = DDP(" in script and "DistributedSampler(data" in script
    out = result.stdout
    assert "train.ipynb:cell 1:2: warning: shell command, not Python: `!pip install torch`" in out
    assert "train.ipynb:cell 2:3: data.sampler: DataLoader sharded" in out
    assert "train.ipynb:cell 3:1: info: cell magic %%time" in out
    assert out.rstrip().endswith("train.ipynb -> train_ddp.py: 8 changes, 1 warning")


def test_the_converted_notebook_trains_like_its_cells(nb: Path) -> None:
    """The cells run as one script on 1 process (batch 64), the conversion on 2 (32 each):
    the same weights."""
    import torch

    assert run("convert", nb.name).exit_code == 0
    cells = "\n".join(text for kind, text in CELLS if kind == "code"
                      and not text.startswith("%%bash"))
    plain = "\n".join(line.replace("%time ", "") for line in cells.splitlines()
                      if not line.startswith(("%%", "%matplotlib", "!", "model?")))
    (nb.parent / "cells.py").write_text(plain)
    single = run_cmd([sys.executable, "cells.py"], cwd=nb.parent, env={"OUT": "one.pt"})
    assert single.returncode == 0, single.stderr
    two = run_cmd([sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2",
                   "train_ddp.py"], cwd=nb.parent, env={"OUT": "two.pt"}, timeout=300)
    assert two.returncode == 0, two.stdout + two.stderr
    one, got = torch.load(nb.parent / "one.pt"), torch.load(nb.parent / "two.pt")
    assert sorted(one) == sorted(got)
    for key in one:  # 64 samples: batch 64 on one, 2 x 32 on two (the same mean gradient)
        torch.testing.assert_close(got[key], one[key], atol=1e-5, rtol=1e-5)


def test_stdout_diff_check_and_in_place(nb: Path) -> None:
    before = snapshot(nb.parent)
    assert run("convert", nb.name, "--check").exit_code == 1
    diff = run("convert", nb.name, "--diff")
    assert "--- a/train.ipynb (code cells)" in diff.stdout
    assert snapshot(nb.parent) == before
    assert "ddp_model" in run("convert", nb.name, "-o", "-").stdout
    stderr = assert_error(run("convert", nb.name, "--in-place"))
    assert "train_ddp.py" in stderr
    assert snapshot(nb.parent) == before


@pytest.mark.parametrize(("text", "said"), [
    ("{not json", "not valid JSON"),
    ('{"worksheets": []}', "no list of cells"),
    ('{"cells": [{"cell_type": "markdown", "source": "just text"}]}', "no code cells"),
])
def test_what_is_not_a_notebook_is_exit_2(nb: Path, text: str, said: str) -> None:
    nb.write_text(text)
    stderr = assert_error(run("convert", nb.name))
    assert said in stderr
    assert not (nb.parent / "train_ddp.py").exists()


def test_string_formatting_across_lines_is_python_not_a_magic(nb: Path) -> None:
    """`print("..." \n % (a, b))`: a line starting with % inside an open bracket is code
    (rasbt/deeplearning-models writes its progress lines so)."""
    cells = json.loads(nb.read_text())
    cells["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [],
                           "execution_count": None,
                           "source": ["print('Epoch: %03d | Loss: %.4f'\n",
                                      "      %(1, 0.5))\n"]})
    nb.write_text(json.dumps(cells))
    result = run("convert", nb.name, "-o", "-")
    assert result.exit_code == 0, result.output
    assert "      %(1, 0.5))" in result.stdout


def test_a_syntax_error_is_named_by_cell_and_line(nb: Path) -> None:
    cells = json.loads(nb.read_text())
    cells["cells"].insert(2, {"cell_type": "code", "metadata": {}, "outputs": [],
                              "execution_count": None, "source": ["x = 1\n", "y = (2\n"]})
    nb.write_text(json.dumps(cells))
    stderr = assert_error(run("convert", nb.name))
    assert stderr.startswith("distrun: error: train.ipynb:cell 2:2:"), stderr


def test_launch_refuses_a_notebook_and_names_convert(nb: Path) -> None:
    result = run_cmd([sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2",
                      nb.name], cwd=nb.parent)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "a Jupyter notebook cannot be launched" in result.stderr
    assert "distrun convert train.ipynb" in result.stderr and "Traceback" not in result.stderr


HELPER = ("import torch\n\n\ndef save(model):\n    torch.save(model.state_dict(), 'nb.pt')\n"
          "    print('saved')\n")


@pytest.fixture
def nb_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """train.ipynb in proj/, its last cell's save handed to `helpers.save` beside it."""
    folder = tmp_path / "proj"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    path = folder / "train.ipynb"
    write_notebook(path)
    cells = json.loads(path.read_text())
    cells["cells"][-1]["source"] = ["import helpers\n", "helpers.save(model)\n"]
    path.write_text(json.dumps(cells))
    (folder / "helpers.py").write_text(HELPER)
    return path


def test_a_notebook_importing_its_folders_module_converts_as_a_project(
        nb_project: Path) -> None:
    """Issue 25, class 6: the copy proj_ddp/ holds the notebook as it was, the converted
    cells as train_ddp.py beside it and the converted helper; nothing of the user's is
    rewritten; the report names cells and the helper's lines."""
    folder = nb_project.parent
    before = snapshot(folder)
    result = run("convert", "proj/train.ipynb")
    assert result.exit_code == 0, result.output
    assert snapshot(folder) == before
    copy = folder.parent / "proj_ddp"
    assert sorted(p.name for p in copy.iterdir()) == ["helpers.py", "train.ipynb",
                                                      "train_ddp.py"]
    assert (copy / "train.ipynb").read_bytes() == nb_project.read_bytes()
    helper = (copy / "helpers.py").read_text()
    assert "if RANK == 0:\n        torch.save(model.state_dict(), 'nb.pt')" in helper
    assert "barrier_if_initialized()" in helper
    assert "if RANK == 0:\n        print('saved')" in helper
    assert "ddp_model = DDP(" in (copy / "train_ddp.py").read_text()
    out = result.stdout
    assert "proj/train.ipynb:cell 2:3: data.sampler: DataLoader sharded" in out
    assert "proj/helpers.py:5: checkpoint.rank0_save:" in out
    assert out.rstrip().endswith("(train.ipynb, helpers.py), 9 changes, 1 warning"), out


def test_a_notebook_project_in_place_check_diff_and_stdout(nb_project: Path) -> None:
    folder = nb_project.parent
    before = snapshot(folder)
    assert run("convert", "proj/train.ipynb", "--check").exit_code == 1
    diff = run("convert", "proj/train.ipynb", "--diff").stdout
    assert "--- a/proj/train.ipynb (code cells)" in diff and "+++ b/proj/helpers.py" in diff
    stderr = assert_error(run("convert", "proj/train.ipynb", "-o", "-"))
    assert "a project converts to a folder" in stderr
    assert snapshot(folder) == before
    result = run("convert", "proj/train.ipynb", "--in-place")
    assert result.exit_code == 0, result.output
    assert nb_project.read_bytes() == before["train.ipynb"]  # never rewritten
    assert (folder / "helpers.py.orig").read_text() == HELPER
    assert "if RANK == 0:" in (folder / "helpers.py").read_text()
    assert "ddp_model = DDP(" in (folder / "train_ddp.py").read_text()
