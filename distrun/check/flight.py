"""PyTorch's Flight Recorder, turned on for checked jobs and read when a job goes quiet.

The recorder keeps, in each rank, a ring of the last collectives its process groups ran
(name, sequence number, sizes, dtypes, state, the Python frames that called it): NCCL's
since PyTorch 2.1, gloo's too in the PyTorch this project pins. A checked launch turns it
on (`TORCH_FR_BUFFER_SIZE`, `TORCH_NCCL_TRACE_BUFFER_SIZE` before PyTorch 2.7: 2000
entries), asks NCCL to
dump it when its watchdog times out (`TORCH_NCCL_DUMP_ON_TIMEOUT=1`) into a folder of
distrun's (`TORCH_FR_DUMP_TEMP_FILE`, also spelled `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`),
each left as the user set it where they did.

When a job goes quiet, distrun does not wait for NCCL's ten minutes: boot.py keeps a
thread blocked on a FIFO (`fr<RANK>.fifo` in the check folder); a byte written there makes
it dump the recorder (`torch._C._distributed_c10d._dump_fr_trace()`, which needs no GIL
the blocked main thread holds: collectives release it) into `trace_rank_<RANK>` of the
dump folder. The hang report gives each rank's last recorded collective and the folder,
which PyTorch's own analyser reads: `torchfrtrace FOLDER --prefix trace_rank_`. No torch
here: the dumps are pickles of plain Python values.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Mapping
from pathlib import Path

PREFIX = "trace_rank_"
ENTRIES = "2000"


def recorder_env(dump_folder: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that turn the recorder on, less those `environ` (the user's
    environment and the launch's `--env`) already sets."""
    wanted: dict[str, str] = {}
    if not {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"} & environ.keys():
        # PyTorch 2.7 renamed it, and warns in every rank at the old name
        wanted["TORCH_FR_BUFFER_SIZE" if _torch_version() >= (2, 7)
               else "TORCH_NCCL_TRACE_BUFFER_SIZE"] = ENTRIES
    if "TORCH_NCCL_DUMP_ON_TIMEOUT" not in environ:
        wanted["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    if not {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} & environ.keys():
        prefix = str(dump_folder / PREFIX)
        wanted.update(TORCH_FR_DUMP_TEMP_FILE=prefix, TORCH_NCCL_DEBUG_INFO_TEMP_FILE=prefix)
    return wanted


def _torch_version() -> tuple[int, int]:
    """The installed torch's (major, minor), read from its metadata (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = version("torch").split(".")
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (PackageNotFoundError, ValueError, IndexError):
        return (0, 0)


def ask_dumps(check_folder: Path, dump_folder: Path, seconds: float) -> dict[int, Path]:
    """Ask every rank listening on its FIFO for a dump; the dumps written within
    `seconds`, by rank."""
    asked: list[int] = []
    before: dict[int, int] = {}  # a dump of an earlier report, kept: only a newer one answers
    for fifo in sorted(check_folder.glob("fr*.fifo")):
        rank_text = fifo.name[2:-5]
        if not rank_text.isdigit():
            continue
        before[int(rank_text)] = _written(dump_folder / f"{PREFIX}{rank_text}")
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads it (the rank has ended); a report goes on
            continue
        try:
            os.write(fd, b"d")
        except OSError:
            continue
        finally:
            os.close(fd)
        asked.append(int(rank_text))
    deadline = time.monotonic() + seconds
    found: dict[int, Path] = {}
    while asked and time.monotonic() < deadline:
        found = {r: dump_folder / f"{PREFIX}{r}" for r in asked
                 if _written(dump_folder / f"{PREFIX}{r}") > before[r]}
        if len(found) == len(asked):
            break
        time.sleep(0.1)
    return found


def _written(dump: Path) -> int:
    """When `dump` was last written (ns), -1 if it is not there. Never removed here: a
    report may already have named it as kept."""
    try:
        return dump.stat().st_mtime_ns
    except OSError:
        return -1


def last_entry(dump: Path) -> str | None:
    """The last collective a dump recorded, said in one line, or None."""
    try:
        data = pickle.loads(dump.read_bytes())  # noqa: S301 (written by our own worker)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not entries:
        return "no collective recorded"
    last = entries[-1]
    name = str(last.get("profiling_name", "?")).split(":")[-1]
    seq = last.get("collective_seq_id") or last.get("p2p_seq_id")
    dtypes = ", ".join(last.get("input_dtypes") or [])
    sizes = f", sizes {last.get('input_sizes')} {dtypes}" if dtypes else ""
    return f"{name} #{seq}{sizes}: {_state(data, last, seq)} ({len(entries)} recorded)"


def _state(data: dict[str, object], last: dict[str, object], seq: object) -> str:
    """Whether the entry's collective completed: its process group's counters where the
    dump has them (gloo's entries stay "scheduled" whatever happened), else its state."""
    group = last.get("process_group")
    statuses = data.get("pg_status")
    status = statuses.get(str(group[0])) if isinstance(statuses, dict) and isinstance(
        group, (tuple, list)) and group else None
    completed = status.get("last_completed_collective") if isinstance(status, dict) else None
    if isinstance(completed, int) and isinstance(seq, int) and completed >= 0:
        return "completed" if completed >= seq else "not completed"
    return str(last.get("state", "?"))


def dumps_in(folder: Path | None) -> list[Path]:
    if folder is None or not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith(PREFIX))
