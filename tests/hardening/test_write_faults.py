"""Fault injection on what `distrun convert` writes (distrun/writes.py, issue 27).

- Two `--in-place` runs started together, 20 times: the original always ends in
  `r.py.orig`, the converted script in `r.py`; the second run waits for the first (then
  finds nothing to do) or is refused with exit 2.
- 30 runs killed (SIGKILL): at each named point of the writer in turn
  (DISTRUN_WRITES_STOP_AT stops it there) or after a random delay, on a script in place,
  a project in place and a project's copy. Right after the kill every original is in
  place or in its `.orig`; after the next run, which undoes the killed one, every file is
  converted, every `.orig` holds the original and no temporary file or journal is left.
- A 64 KiB tmpfs filled to different levels (root only; skipped where mount is not
  permitted): a run exits 0 or 2, never half-written, nothing temporary left.

The runs are forked from this process (distrun and LibCST already imported), so that 90
of them fit in well under a minute. Counts are printed (pytest -s) and recorded in
RELIABILITY-style lines at the end of each test.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrun.cli import main
from tests.cli.convert_helpers import TRAIN, run
from tests.cli.test_convert_writes import ENTRY, UTILS

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
FILE_POINTS = ("lock", "staged", "backup", "replaced", "delay")
PROJECT_POINTS = ("lock", "staged", "backup", "journal", "replaced", "delay")
COPY_POINTS = ("lock", "copied", "delay")


@pytest.fixture(scope="module", autouse=True)
def _warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import everything a conversion needs here, once, before the forks."""
    proj = tmp_path_factory.mktemp("warm")
    (proj / "train.py").write_text(ENTRY)
    (proj / "utils.py").write_text(UTILS)
    assert run("convert", str(proj / "train.py"), "--check").exit_code == 1


def _fork(args: list[str], cwd: Path, stop_at: str | None = None,
          gate: int | None = None) -> int:
    """Start `distrun ARGS` in a forked child; its output goes to cwd/.out-PID (unless
    the test looks for it, nothing). `gate`: a pipe to read from before starting."""
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        os.chdir(cwd)
        if stop_at is not None:
            os.environ["DISTRUN_WRITES_STOP_AT"] = stop_at
        out = os.open(os.devnull, os.O_WRONLY)
        os.dup2(out, 1)
        log = os.open(f"/tmp/.distrun-fault-{os.getpid()}.err", os.O_WRONLY | os.O_CREAT, 0o600)
        os.dup2(log, 2)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 (pytest's capture is not fd 1)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        if gate is not None:
            os.read(gate, 1)
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _wait(pid: int) -> tuple[int, str]:
    _, status = os.waitpid(pid, 0)
    log = Path(f"/tmp/.distrun-fault-{pid}.err")
    err = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    return os.waitstatus_to_exitcode(status), err


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.parent.rglob(".*")
                  if ".distrun-" in p.name or p.name.endswith(".tmp"))


def _originals_safe(files: dict[Path, str]) -> bool:
    """Each original is in place or in its .orig."""
    for path, text in files.items():
        backup = Path(f"{path}.orig")
        if not (path.read_text() == text or (backup.exists() and backup.read_text() == text)):
            return False
    return True


def test_two_in_place_runs_at_once(tmp_path: Path) -> None:
    seen: Counter[str] = Counter()
    for trial in range(20):
        work = tmp_path / f"t{trial}"
        work.mkdir()
        (work / "r.py").write_text(TRAIN)
        read, write = os.pipe()
        pids = [_fork(["convert", "r.py", "--in-place"], work, gate=read) for _ in range(2)]
        os.write(write, b"go")
        results = [_wait(pid) for pid in pids]
        os.close(read)
        os.close(write)
        codes = sorted(code for code, _ in results)
        errs = "".join(err for _, err in results)
        assert codes in ([0, 0], [0, 2]), (codes, errs)
        assert "Traceback" not in errs
        assert (work / "r.py.orig").read_text() == TRAIN, errs
        assert "DistributedDataParallel" in (work / "r.py").read_text()
        assert _leftovers(work / "r.py") == []
        seen["waited" if "waiting for it" in errs else "one after the other"] += 1
        seen[f"exits {codes}"] += 1
    print(f"\ntwo runs at once, 20 trials: {dict(seen)}")


def _stop_and_kill(pid: int, point: str, rng: random.Random) -> str:
    if point == "delay":
        time.sleep(rng.uniform(0.0, 0.08))
        os.kill(pid, signal.SIGKILL)
        code, _ = _wait(pid)
        return "killed after a delay" if code == -signal.SIGKILL else "ended before"
    _, status = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
        _wait(pid)
        return f"killed at {point}"
    Path(f"/tmp/.distrun-fault-{pid}.err").unlink(missing_ok=True)
    return f"ended before {point}"


def test_runs_killed_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(27)
    seen: Counter[str] = Counter()
    for trial in range(30):
        kind = ("file", "project", "copy")[trial % 3]
        work = tmp_path / f"t{trial}"
        work.mkdir()
        if kind == "file":
            originals = {work / "r.py": TRAIN}
            args = ["convert", "r.py", "--in-place"]
            point = FILE_POINTS[trial // 3 % len(FILE_POINTS)]
        else:
            originals = {work / "proj" / "train.py": ENTRY, work / "proj" / "utils.py": UTILS}
            args = ["convert", "proj/train.py"] + (["--in-place"] if kind == "project" else [])
            points = PROJECT_POINTS if kind == "project" else COPY_POINTS
            point = points[trial // 3 % len(points)]
            (work / "proj").mkdir()
        for path, text in originals.items():
            path.write_text(text)
        pid = _fork(args, work, stop_at=None if point == "delay" else point)
        what = _stop_and_kill(pid, point, rng)
        seen[f"{kind}: {what}"] += 1
        assert _originals_safe(originals), (kind, what)
        again = args + (["--force"] if kind == "copy" else [])  # a finished copy is there
        code, err = _wait(_fork(again, work))  # the next run undoes the killed one
        assert code == 0, err
        assert "Traceback" not in err
        assert _leftovers(work / "x") == [], (kind, what, err)
        if kind == "copy":
            assert all(p.read_text() == t for p, t in originals.items())
            converted = work / "proj_ddp" / "utils.py"
        else:
            assert all(Path(f"{p}.orig").read_text() == t for p, t in originals.items()), \
                (kind, what, err)
            converted = next(iter(originals)).parent / ("r.py" if kind == "file" else "utils.py")
        assert "Distributed" in converted.read_text(), (kind, what, err)
        if "put back" in err or "removed" in err:
            seen["next run undid something"] += 1
    print(f"\n30 killed runs: {dict(sorted(seen.items()))}")


@contextlib.contextmanager
def _tmpfs(folder: Path) -> Iterator[Path]:
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk(tmp_path: Path) -> None:
    big = TRAIN + "".join(f"# padding line {i:05d} of a long script, to fill the disk\n"
                          for i in range(300))  # about 19 KB
    seen: Counter[str] = Counter()
    with _tmpfs(tmp_path / "small") as disk:
        for fill in range(0, 48, 4):  # KiB taken before the run
            for kind in ("file", "project"):
                for name in os.listdir(disk):
                    subprocess.run(["rm", "-rf", str(disk / name)], check=True)
                (disk / "fill").write_bytes(b"x" * (fill << 10))
                if kind == "file":
                    originals = {disk / "r.py": big}
                    args = ["convert", "r.py", "--in-place"]
                else:
                    (disk / "proj").mkdir()
                    originals = {disk / "proj" / "train.py": ENTRY,
                                 disk / "proj" / "utils.py": UTILS + big[len(TRAIN):][:8000]}
                    args = ["convert", "proj/train.py", "--in-place"]
                try:
                    for path, text in originals.items():
                        path.write_text(text)
                except OSError:
                    seen["no room for the input"] += 1
                    continue
                code, err = _wait(_fork(args, disk))
                assert code in (0, 2), err
                assert "Traceback" not in err
                assert _originals_safe(originals), err
                assert _leftovers(disk / "x") == [], err
                if code == 2:
                    assert "No space left on device" in err, err
                    assert all(p.read_text() == t for p, t in originals.items())
                    assert not any(Path(f"{p}.orig").exists() for p in originals)
                seen[f"{kind}: exit {code}"] += 1
    print(f"\nfull disk: {dict(sorted(seen.items()))}")
