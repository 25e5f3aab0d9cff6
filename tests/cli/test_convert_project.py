"""`distrun convert` on a script that imports modules of its own folder (project mode):
what is written where, what is left alone, what is refused, and how files are named."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.cli.convert_helpers import assert_error, run, snapshot

FILES = {
    "train.py": """\
        import torch
        import torch.nn as nn
        from models.net import Net
        from utils import get_loader, progress_bar
        import evaluate as ev


        def train(model, loader, optimizer, epoch):
            for i, (x, y) in enumerate(loader):
                loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                progress_bar(i, len(loader), f"epoch {epoch} loss {loss.item():.3f}")


        def main():
            torch.manual_seed(0)
            net = Net(n_classes=3)
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            loader = get_loader(shuffle=True)
            for epoch in range(2):
                train(net, loader, optimizer, epoch)
                print("accuracy", ev.accuracy(net, loader))
            torch.save({"net": net.state_dict()}, "net.pt")


        if __name__ == "__main__":
            main()
        """,
    "utils.py": """\
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def get_loader(shuffle):
            data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
            return DataLoader(data, batch_size=8, shuffle=shuffle)


        def progress_bar(step, total, message):
            print(f"[{step + 1}/{total}] {message}")
        """,
    "evaluate.py": """\
        import torch


        @torch.no_grad()
        def accuracy(net, loader):
            hits = 0
            for x, y in loader:
                hits += (net(x).argmax(1) == y).sum().item()
            return hits / len(loader.dataset) * net.n_classes / net.n_classes
        """,
    "models/__init__.py": "",
    "models/net.py": """\
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, n_classes):
                super().__init__()
                self.n_classes = n_classes
                self.fc = nn.Linear(4, n_classes)

            def forward(self, x):
                return self.fc(x)
        """,
    "README.txt": "not Python: copied as it is\n",
}


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "proj"
    for rel, text in FILES.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.chdir(tmp_path)
    return folder


def test_default_is_a_converted_copy_of_the_folder(proj: Path) -> None:
    before = snapshot(proj)
    result = run("convert", "proj/train.py")
    assert result.exit_code == 0, result.output
    assert snapshot(proj) == before  # the project itself is untouched
    out = proj.parent / "proj_ddp"
    copied = snapshot(out)
    assert sorted(copied) == sorted(before)
    # changed: the entry (setup, DDP, sharding by the helper...) and utils (sampler, rank 0)
    assert copied["train.py"] != before["train.py"]
    assert copied["utils.py"] != before["utils.py"]
    assert (b"DistributedSampler(data, shuffle=shuffle, num_replicas=WORLD_SIZE, rank=RANK)"
            in copied["utils.py"])
    assert b"if RANK == 0:" in copied["utils.py"]
    assert b"init_process_group" not in copied["utils.py"]  # only the entry starts the group
    # untouched: what needs no change is copied byte for byte
    for rel in ("evaluate.py", "models/net.py", "models/__init__.py", "README.txt"):
        assert copied[rel] == before[rel], rel
    # reports name each file as the user reaches it, with its line
    assert "proj/utils.py:7: data.sampler: DataLoader sharded" in result.stdout
    assert "proj/train.py:" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith(
        "proj/train.py -> proj_ddp: 5 files read, 2 changed (train.py, utils.py)")
    for data, rel in ((copied[r], r) for r in copied if r.endswith(".py")):
        compile(data, rel, "exec")


def test_the_model_keeps_its_name_and_the_training_pass_gets_the_ddp_object(proj: Path) -> None:
    assert run("convert", "proj/train.py").exit_code == 0
    train = (proj.parent / "proj_ddp" / "train.py").read_text()
    assert "ddp_net = DDP(" in train
    assert "train(ddp_net, loader, optimizer, epoch)" in train  # train() trains what it gets
    # evaluation reads net.n_classes: the plain model; and the training loader read whole
    # (a measure of the whole set on every rank: data.whole_for_measures)
    assert 'ev.accuracy(net, whole_loader(loader))' in train
    assert '{"net": net.state_dict()}' in train  # no module. prefix, by construction


def test_output_folder_is_refused_when_it_exists_and_kept_with_force(proj: Path) -> None:
    out = proj.parent / "elsewhere"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert_error(run("convert", "proj/train.py", "-o", str(out)))
    assert snapshot(out) == {"mine.txt": b"keep me"}
    result = run("convert", "proj/train.py", "-o", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert (out / "train.py").is_file()
    assert snapshot(proj.parent / "elsewhere.orig") == {"mine.txt": b"keep me"}
    again = run("convert", "proj/train.py", "-o", str(out), "--force")
    assert_error(again)  # an earlier backup is never replaced
    assert "elsewhere.orig already exists" in again.stderr


def test_output_folder_holding_the_project_is_refused(proj: Path) -> None:
    assert_error(run("convert", "proj/train.py", "-o", str(proj)))
    assert_error(run("convert", "proj/train.py", "-o", str(proj.parent), "--force"))
    assert (proj / "train.py").is_file()


def test_in_place_rewrites_the_changed_files_and_keeps_orig(proj: Path) -> None:
    before = snapshot(proj)
    result = run("convert", "proj/train.py", "--in-place")
    assert result.exit_code == 0, result.output
    after = snapshot(proj)
    assert after["train.py.orig"] == before["train.py"]
    assert after["utils.py.orig"] == before["utils.py"]
    assert after["evaluate.py"] == before["evaluate.py"]
    assert "evaluate.py.orig" not in after
    assert not (proj.parent / "proj_ddp").exists()
    assert run("convert", "proj/train.py", "--check").exit_code == 0  # converting twice: no-op


def test_diff_and_check_write_nothing(proj: Path) -> None:
    before = snapshot(proj.parent)
    diff = run("convert", "proj/train.py", "--diff")
    assert diff.exit_code == 0
    assert "--- a/proj/train.py" in diff.stdout and "--- a/proj/utils.py" in diff.stdout
    assert "a/proj/evaluate.py" not in diff.stdout  # unchanged files are not in the diff
    assert run("convert", "proj/train.py", "--check").exit_code == 1
    assert snapshot(proj.parent) == before


def test_stdout_cannot_hold_a_project(proj: Path) -> None:
    stderr = assert_error(run("convert", "proj/train.py", "-o", "-"))
    assert "give -o DIR" in stderr


def test_a_module_that_is_not_python_stops_everything(proj: Path) -> None:
    (proj / "utils.py").write_text("def get_loader(:\n    pass\n")
    before = snapshot(proj.parent)
    stderr = assert_error(run("convert", "proj/train.py"))
    assert "proj/utils.py:1:" in stderr
    assert snapshot(proj.parent) == before  # nothing written


def test_large_data_is_not_copied_and_said(proj: Path) -> None:
    data = proj / "data"
    data.mkdir()
    with open(data / "train.bin", "wb") as f:
        f.truncate(80 << 20)  # sparse: 80 MiB, no Python in the folder
    with open(proj / "weights.pt", "wb") as f:
        f.truncate(20 << 20)
    result = run("convert", "proj/train.py")
    assert result.exit_code == 0, result.output
    out = proj.parent / "proj_ddp"
    assert not (out / "data").exists() and not (out / "weights.pt").exists()
    assert "not copied: data (80 MiB" in result.stdout
    assert "not copied: weights.pt (20 MiB" in result.stdout
    assert f"ln -s {data} proj_ddp/data" in result.stdout


def test_a_script_importing_nothing_local_is_converted_alone(proj: Path) -> None:
    (proj / "alone.py").write_text((proj / "train.py").read_text().replace(
        "from models.net import Net\nfrom utils import get_loader, progress_bar\n"
        "import evaluate as ev\n", ""))
    result = run("convert", "proj/alone.py")
    assert result.exit_code == 0, result.output
    assert (proj / "alone_ddp.py").is_file()
    assert not (proj.parent / "proj_ddp").exists()


def test_root_finds_the_packages_of_the_repository(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """minGPT's layout: projects/adder/adder.py imports the `mingpt` package at the top."""
    repo = tmp_path / "repo"
    (repo / "lib").mkdir(parents=True)
    (repo / "projects" / "demo").mkdir(parents=True)
    (repo / "lib" / "__init__.py").write_text("")
    (repo / "lib" / "trainer.py").write_text(textwrap.dedent(FILES["utils.py"]))
    entry = repo / "projects" / "demo" / "run.py"
    entry.write_text(textwrap.dedent(FILES["train.py"]).replace(
        "from models.net import Net\nfrom utils import get_loader, progress_bar\n"
        "import evaluate as ev\n", "from lib.trainer import get_loader, progress_bar\n"
    ).replace("Net(n_classes=3)", "nn.Linear(4, 3)").replace(
        '                print("accuracy", ev.accuracy(net, loader))\n', ""))
    monkeypatch.chdir(tmp_path)
    alone = run("convert", "repo/projects/demo/run.py", "--diff")
    assert "lib/trainer.py" not in alone.stdout  # not found from the script's folder
    result = run("convert", "repo/projects/demo/run.py", "--root", "repo", "-o", "out")
    assert result.exit_code == 0, result.output
    assert "repo/lib/trainer.py:7: data.sampler: DataLoader sharded" in result.stdout
    assert b"DistributedSampler" in (tmp_path / "out" / "lib" / "trainer.py").read_bytes()
    assert (tmp_path / "out" / "projects" / "demo" / "run.py").is_file()


def test_an_explicit_output_always_holds_the_result(proj: Path) -> None:
    """A Makefile step `convert -o build/x.py && launch build/x.py` works even when the
    script needs no change."""
    script = proj / "ready.py"
    script.write_text("print('nothing to train here')\n")
    result = run("convert", str(script), "-o", "build.py")
    assert result.exit_code == 0, result.output
    assert Path("build.py").read_text() == script.read_text()
    assert os.path.exists("build.py")
