"""Where each rank waits, when a job goes quiet: asked of the ranks of this node, read
from what the worker boot and the probe leave in the check folder.

- `stacks<RANK>.pid`, `stacks<RANK>.txt`: boot.py registers faulthandler for a signal;
  distrun sends it and reads the stacks of every thread (written from C, so a rank
  blocked inside a collective answers).
- `coll<RANK>`: the last collective the rank entered (probe_collectives.py): sequence number, name,
  tensor shape and dtype, the script's line, whether it returned.

`where_ranks_wait` returns the lines of the report: per rank, the script's frames of its
main thread (innermost first) and its last collective, then one line of diagnosis when
the facts allow one. Reads files and sends signals only: no torch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from distrun.check.flight import PREFIX, ask_dumps, last_entry

SIGNAL = signal.SIGUSR2  # the one boot.py registers
ANSWER_SECONDS = 3.0  # how long distrun waits for the ranks' stacks
MAX_FRAMES = 4  # of the script's own, per rank

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-f]+")
_LIBRARY = tuple(os.path.join(p, "") for p in {
    *(sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")),
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})


@dataclass
class Frame:
    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}, in {self.function}"


@dataclass
class RankWait:
    rank: int
    frames: list[Frame] = field(default_factory=list)  # the script's, innermost first
    collective: dict[str, object] | None = None
    answered: bool = False

    @property
    def inside(self) -> bool:
        """In a collective that has not returned."""
        return self.collective is not None and self.collective.get("state") == "in"

    def collective_text(self) -> str:
        c = self.collective
        if c is None:
            return "none yet (no collective called by the script)"
        shape = f", shape {c['shape']} {c['dtype']}" if c.get("shape") is not None else ""
        where = f" at {_short(str(c['site']))}" if c.get("site") not in (None, "?") else ""
        state = "waiting in it" if self.inside else "returned"
        return f"{c['op']} #{c['seq']}{shape}{where}: {state}"


def where_ranks_wait(folder: Path | None, local_ranks: list[int],
                     dumps: Path | None = None) -> list[str]:
    """The report's lines for the ranks of this node whose boot left a way to ask them;
    with `dumps`, each rank's Flight Recorder too (check/flight.py)."""
    if folder is None or not folder.is_dir():
        return []
    waits = _ask(folder)
    if not waits:
        return []
    recorded = {r: last_entry(p) for r, p in ask_dumps(folder, dumps, ANSWER_SECONDS).items()
                } if dumps is not None else {}
    lines = ["  where each rank is (the script's frames, innermost first):"]
    for wait in waits:
        lines.append(f"  rank {wait.rank}: last collective: {wait.collective_text()}")
        if recorded.get(wait.rank):
            lines.append(f"    flight recorder's last: {recorded[wait.rank]}")
        if not wait.answered:
            lines.append("    (no stack: the rank did not answer)")
        for frame in wait.frames[:MAX_FRAMES]:
            lines.append(f"    {_short(frame.path)}:{frame.line}, in {frame.function}")
    diagnosis = diagnose(waits)
    if diagnosis:
        lines.append(f"  diagnosis: {diagnosis}")
    if recorded and dumps is not None:
        lines.append(f"  flight recorder dumps: {dumps} (kept; for NCCL's, PyTorch's "
                     f"`torchfrtrace {dumps} --prefix {PREFIX}` matches them across ranks)")
    return lines


def _ask(folder: Path) -> list[RankWait]:
    """Signal each rank that registered, wait for its stacks, read them."""
    asked: dict[int, Path] = {}
    for pid_file in sorted(folder.glob("stacks*.pid")):
        rank_text = pid_file.stem.removeprefix("stacks")
        try:
            rank, pid = int(rank_text), int(pid_file.read_text().strip())
            out = folder / f"stacks{rank}.txt"
            out.write_bytes(b"")  # the file the rank writes into (opened for appending)
            os.kill(pid, SIGNAL)
        except (ValueError, OSError):
            continue
        asked[rank] = out
    deadline = time.monotonic() + ANSWER_SECONDS
    sizes: dict[int, int] = {}
    while time.monotonic() < deadline:
        now = {r: p.stat().st_size if p.exists() else 0 for r, p in asked.items()}
        if all(now.values()) and now == sizes:
            break  # every rank wrote, and nothing more is coming
        sizes = now
        time.sleep(0.2)
    waits = []
    for rank in sorted({*asked, *_coll_ranks(folder)}):
        wait = RankWait(rank, collective=_collective(folder / f"coll{rank}"))
        text = asked[rank].read_text(errors="replace") if rank in asked else ""
        wait.answered = bool(text.strip())
        wait.frames = _main_frames(text)
        waits.append(wait)
    return waits


def _coll_ranks(folder: Path) -> set[int]:
    return {int(p.name[4:]) for p in folder.glob("coll*") if p.name[4:].isdigit()}


def _collective(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_bytes().strip() or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data["state"] = str(data.get("state", "")).strip()  # "in " / "out": fixed width
    return data


def _main_frames(text: str) -> list[Frame]:
    """The script's frames of the thread that took the signal (the main thread: Python
    handles signals there), innermost first, as faulthandler lists them; where that
    thread has none, those of the first thread that has (a Ray Train worker runs the
    script in a thread of its own)."""
    blocks: list[tuple[bool, list[Frame]]] = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            blocks.append((head["current"] == "Current thread", []))
            continue
        frame = _FRAME.match(line)
        if frame and blocks:
            blocks[-1][1].append(Frame(frame["path"], int(frame["line"]), frame["func"]))
    main = next((frames for current, frames in blocks if current), None)
    if main is None and blocks:
        main = blocks[-1][1]  # faulthandler lists the main thread last
    own = _own_frames(main or [])
    return own or next((found for _, frames in blocks if (found := _own_frames(frames))), [])


def _own_frames(frames: list[Frame]) -> list[Frame]:
    """The frames of the script's own files (not the libraries', distrun's, frozen)."""
    return [f for f in frames if not f.path.startswith(_LIBRARY) and not f.path.startswith("<")]


def diagnose(waits: list[RankWait]) -> str:
    """One line, when the ranks' facts tell what went wrong."""
    inside = [w for w in waits if w.inside]
    if not inside or len(waits) < 2:
        return ""
    first = inside[0]
    c = first.collective
    assert c is not None
    for other in waits:
        o = other.collective
        if other is first or o is None:
            continue
        if other.inside and o.get("seq") == c.get("seq") and (
                o.get("op"), o.get("shape")) != (c.get("op"), c.get("shape")):
            return (f"rank {first.rank} is in {c['op']} #{c['seq']} ({_short(str(c['site']))}) "
                    f"while rank {other.rank} is in {o['op']} #{o['seq']} "
                    f"({_short(str(o['site']))}) with {_differs(c, o)}: the ranks call "
                    "different collectives at the same point")
    for other in waits:
        if other.inside or other is first:
            continue
        frame = other.frames[0] if other.frames else None
        at = f" at {_short(frame.path)}:{frame.line}, in {frame.function}" if frame else ""
        done = other.collective.get("seq", 0) if other.collective else 0
        return (f"rank {first.rank} waits in {c['op']} #{c['seq']} "
                f"({_short(str(c['site']))}) while rank {other.rank} is in no collective "
                f"(its last: #{done}){at}: rank {other.rank} never calls it (a collective "
                "on one rank only, or one rank with more batches or steps)")
    seqs = {w.collective.get("seq") for w in inside if w.collective}
    if len(seqs) > 1:
        ranks = ", ".join(f"rank {w.rank} at #{w.collective['seq']}" for w in inside
                          if w.collective)
        return (f"the ranks wait in different collectives ({ranks}): one rank called more "
                "collectives than another before")
    return ""


def _differs(a: dict[str, object], b: dict[str, object]) -> str:
    if a.get("op") != b.get("op"):
        return "another collective"
    return f"another shape ({a.get('shape')} and {b.get('shape')})"


def _short(path: str) -> str:
    """A path relative to the current folder where it is below it."""
    try:
        return os.path.relpath(path) if path.startswith(os.getcwd()) else path
    except ValueError:
        return path
