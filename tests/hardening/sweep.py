"""Feed `convert_source` real Python files and check what must always hold.

Shared by tests/hardening/test_convert_sweep.py (a fixed sample) and
benchmarks/bench_sweep.py (every file). For one file, `check_file`:

1. decodes it as the CLI does (`distrun.files.read_script`) and compiles it; a file
   that cannot be decoded or does not compile is *skipped* (counted, not judged);
2. converts it: the only exception allowed is a `DistrunError` (a documented refusal
   with a message), anything else is a *crash*;
3. a converted output must compile, and converting it again must give it back
   unchanged (a fixed point);
4. a result that is not "converted" (already distributed, nothing to do, unsupported)
   must be the input, byte for byte.

A broken rule is a `problem` on the `Outcome`; the sweep never stops at one.
"""

from __future__ import annotations

import sys
import sysconfig
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from distrun.convert import ConvertOptions, convert_source
from distrun.errors import DistrunError
from distrun.files import read_script

SKIPPED = "skipped-not-compilable"
REFUSED = "refused"
CRASHED = "crashed"


# Appended to a real file (`graft=True`), it makes the file a training script, so that
# every rewrite runs over the file's own code (its prints, devices, saves, imports).
TRAINING_TAIL = """\

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
loader = DataLoader(data, batch_size=4, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
torch.save(model.state_dict(), "model.pt")
"""


# The grafted sweep turns through these, one file each, so every option meets real code.
OPTION_SETS = (
    ConvertOptions(),
    ConvertOptions(target="accelerate", amp="bf16"),
    ConvertOptions(amp="fp16", sync_bn=True, scale_lr=True),
    ConvertOptions(amp="none", grad_accum_no_sync=True, eval_shard=True),
    ConvertOptions(target="accelerate", amp="none", grad_accum_no_sync=True),
)


@dataclass(frozen=True)
class Outcome:
    path: Path
    status: str  # a ConvertResult status, REFUSED, SKIPPED or CRASHED
    seconds: float  # time spent in convert_source (both passes)
    problem: str | None = None  # a broken rule, with enough detail to reproduce it
    message: str = ""  # the refusal's message, or why it was skipped


def site_packages() -> Path:
    """The site-packages of the interpreter running this (the project venv)."""
    return Path(sysconfig.get_paths()["purelib"])


def python_files(roots: Iterable[Path]) -> list[Path]:
    """Every `.py` file under `roots`, sorted by path (deterministic)."""
    found: set[Path] = set()
    for root in roots:
        found.update(p for p in root.rglob("*.py") if p.is_file() and not p.is_symlink())
    return sorted(found)


def every_nth(files: list[Path], count: int, offset: int = 0) -> list[Path]:
    """About `count` files spread evenly over the sorted list, from the `offset`-th on."""
    step = max(1, len(files) // max(1, count))
    return files[offset % step::step]


def _compiles(text: str, filename: str) -> str | None:
    """None if `text` compiles, else why not."""
    try:
        compile(text, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def check_text(text: str, filename: str, options: ConvertOptions | None = None,
               path: Path | None = None) -> Outcome:
    """Convert `text` (which compiles) and check the rules above."""
    where = path if path is not None else Path(filename)
    start = time.perf_counter()
    try:
        result = convert_source(text, filename, options)
    except DistrunError as err:
        return Outcome(where, REFUSED, time.perf_counter() - start, message=err.message)
    except Exception:
        return Outcome(where, CRASHED, time.perf_counter() - start,
                       problem="convert_source raised:\n" + traceback.format_exc(limit=-8))
    seconds = time.perf_counter() - start
    if result.status != "converted":
        problem = None if result.output == text else (
            f"status {result.status!r} but the output differs from the input")
        return Outcome(where, result.status, seconds, problem)
    broken = _compiles(result.output, filename)
    if broken is not None:
        return Outcome(where, result.status, seconds, f"the output does not compile: {broken}")
    start = time.perf_counter()
    try:
        again = convert_source(result.output, filename, options)
    except Exception:
        return Outcome(where, CRASHED, seconds + time.perf_counter() - start,
                       problem="converting the output raised:\n"
                       + traceback.format_exc(limit=-8))
    seconds += time.perf_counter() - start
    if again.output != result.output:
        return Outcome(where, result.status, seconds,
                       f"not a fixed point: converting the output changed it again "
                       f"(second status {again.status!r})")
    return Outcome(where, result.status, seconds)


def check_file(path: Path, options: ConvertOptions | None = None,
               graft: bool = False) -> Outcome:
    """Decode and compile `path` (else SKIPPED), then `check_text` it; with `graft`, with
    TRAINING_TAIL appended, so that every rewrite meets the file's own code."""
    try:
        text = read_script(str(path)).text
    except DistrunError as err:
        return Outcome(path, SKIPPED, 0.0, message=err.message)
    if graft:
        text = text + ("" if text.endswith(("\n", "\r")) or not text else "\n") + TRAINING_TAIL
    why_not = _compiles(text, str(path))
    if why_not is not None:
        return Outcome(path, SKIPPED, 0.0, message=why_not)
    return check_text(text, str(path), options, path)


if __name__ == "__main__":  # a quick look: python -m tests.hardening.sweep FILE...
    for arg in sys.argv[1:]:
        print(check_file(Path(arg)))
