"""`distrun convert` through the real CLI entry point: idempotence (the output is a
fixed point, an already distributed script is left alone) and source fidelity (comments,
line endings, BOM and source encoding are kept)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.convert_helpers import TRAIN, assert_no_distrun_imports_and_compiles, run
from tests.conftest import CORPUS

ALREADY_DISTRIBUTED = """\
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=True))
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
dist.destroy_process_group()
"""

CORPUS_SCRIPTS = sorted(p.name for p in CORPUS.glob("*.py"))


# --------------------------------------------------------------------------- idempotence


@pytest.mark.parametrize("name", CORPUS_SCRIPTS)
def test_corpus_output_compiles_and_is_a_fixed_point(name: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(CORPUS / name, tmp_path / name)
    stem = name.removesuffix(".py")

    first = run("convert", name)
    assert first.exit_code == 0, first.output
    out = tmp_path / f"{stem}_ddp.py"
    converted = out.read_bytes()
    assert_no_distrun_imports_and_compiles(converted, out.name)

    check = run("convert", out.name, "--check")
    assert check.exit_code == 0, f"--check on the converted output:\n{check.output}"

    again = run("convert", out.name, "-o", "again.py")
    assert again.exit_code == 0, again.output
    assert out.read_bytes() == converted
    if (tmp_path / "again.py").exists():
        assert (tmp_path / "again.py").read_bytes() == converted


def test_already_distributed_script_is_left_alone(work: Path) -> None:
    (work / "train.py").write_text(ALREADY_DISTRIBUTED)

    check = run("convert", "train.py", "--check")
    assert check.exit_code == 0, check.output

    result = run("convert", "train.py", "--in-place")
    assert result.exit_code == 0, result.output
    assert (work / "train.py").read_text() == ALREADY_DISTRIBUTED

    result = run("convert", "train.py")
    assert result.exit_code == 0, result.output
    ddp = work / "train_ddp.py"
    assert not ddp.exists() or ddp.read_text() == ALREADY_DISTRIBUTED


def test_already_distributed_to_stdout_prints_it_unchanged(work: Path) -> None:
    (work / "train.py").write_text(ALREADY_DISTRIBUTED)

    result = run("convert", "train.py", "-o", "-")

    assert result.exit_code == 0, result.output
    assert result.stdout == ALREADY_DISTRIBUTED


# --------------------------------------------------------------------------- source fidelity


def test_comment_lines_survive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(CORPUS / "comments_everywhere.py", tmp_path)

    result = run("convert", "comments_everywhere.py")

    assert result.exit_code == 0, result.output
    converted = (tmp_path / "comments_everywhere_ddp.py").read_text().splitlines()
    converted_stripped = {line.strip() for line in converted}
    comment_lines = [line.strip() for line in (CORPUS / "comments_everywhere.py").read_text()
                     .splitlines() if line.strip().startswith("#")]
    assert len(comment_lines) >= 5
    missing = [c for c in comment_lines if c not in converted_stripped]
    assert missing == [], f"comment lines lost: {missing}"


def test_crlf_line_endings_are_preserved(work: Path) -> None:
    (work / "train.py").write_bytes(TRAIN.replace("\n", "\r\n").encode())

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert data.count(b"\n") > TRAIN.count("\n")  # it was converted
    bare_lf = data.count(b"\n") - data.count(b"\r\n")
    assert bare_lf == 0, f"{bare_lf} lines end in a bare LF"
    compile(data, "train_ddp.py", "exec")


def test_utf8_bom_is_preserved(work: Path) -> None:
    bom = b"\xef\xbb\xbf"
    (work / "train.py").write_bytes(bom + ("# überall\n" + TRAIN).encode())

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert data.startswith(bom)
    assert not data[3:].startswith(bom)  # exactly one
    assert "# überall" in data[3:].decode("utf-8")
    compile(data, "train_ddp.py", "exec")


def test_latin1_file_with_coding_line_stays_latin1(work: Path) -> None:
    text = "# -*- coding: latin-1 -*-\n# café crème\n" + TRAIN + 'print("température")\n'
    (work / "train.py").write_bytes(text.encode("latin-1"))

    result = run("convert", "train.py")

    assert result.exit_code == 0, result.output
    data = (work / "train_ddp.py").read_bytes()
    assert b"# caf\xe9 cr\xe8me" in data  # single latin-1 bytes, not UTF-8 pairs
    assert b"temp\xe9rature" in data
    assert "coding: latin-1" in data.decode("latin-1").splitlines()[0]
    compile(data, "train_ddp.py", "exec")
