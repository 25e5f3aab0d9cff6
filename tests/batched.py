"""End-to-end equivalence cases proven many per launch: one original process, one launch.

A test module declares its cases at import (`Batch(name, [Case...])`); the first test
that asks for a result (`BATCH.result(case)`) runs the whole batch, once per session,
shared by the pytest-xdist workers through a folder and a file lock (as tests/reference.py
shares reference runs): each case converted (`distrun convert`, a process each, its output
and exit code kept), every original run by one zygote (tests/zygote.py: torch imported
once, each case a forked child of it: a process of its own, batch 64, single.pt), every
conversion by ONE `distrun launch --nproc-per-node 2 --no-check tests/zygote.py ranked`
(real torchrun, 2 ranks, gloo; a rendezvous of its own per case: batch 32 per rank,
multi.pt). A case whose conversion failed is left out of both runs. Each test then reads
its own case's result and asserts on it; a failure shows that case's own output (each
rank's stderr). Not proven here: launch's check (`--check`), which needs a launch per
script; tests asserting its findings, or what the launch printed, launch it themselves.

A case's folder holds `orig/` (the original's copy of the case's files: it runs there),
`conv/` (convert runs there, and the conversion), single.pt and multi.pt.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import ROOT, distrun, run_cmd

ZYGOTE = ROOT / "tests/zygote.py"
FIXTURES = ROOT / "tests/convert/fixtures"
CASE_TIMEOUT = 120  # seconds a case's process may run (each rank's, in the launch)


@dataclass(frozen=True)
class Case:
    """A script, its conversion and how each runs; paths relative to the case's folder."""

    name: str
    script: str  # the original (run from the folder: `python FOLDER/SCRIPT`)
    converted: str  # what convert writes
    convert: tuple[str, ...]  # convert's arguments
    convert_cwd: str = "."  # where convert runs
    files: Mapping[str, str] = field(default_factory=dict)  # path -> text
    trees: Mapping[str, Path] = field(default_factory=dict)  # path -> a folder copied there
    env: Mapping[str, str] = field(default_factory=dict)  # both runs (after BATCH_SIZE...)
    single_env: Mapping[str, str] = field(default_factory=dict)  # the original's (after env)
    two_env: Mapping[str, str] = field(default_factory=dict)  # the conversion's (after env)

    def spec(self) -> dict[str, object]:
        return {"name": self.name, "script": self.script, "converted": self.converted,
                "convert": list(self.convert), "convert_cwd": self.convert_cwd,
                "files": dict(self.files), "env": dict(self.env),
                "single_env": dict(self.single_env), "two_env": dict(self.two_env),
                "trees": {k: str(v) for k, v in self.trees.items()}}


def fixture_case(name: str, fixture: str, stem: str, source: str | None = None) -> Case:
    """FIXTURES/`fixture` (or `source`) as STEM.py, converted there into STEM_ddp.py (as
    test_issue25_steps.convert_fixture does)."""
    text = source if source is not None else (FIXTURES / fixture).read_text()
    return Case(name, f"{stem}.py", f"{stem}_ddp.py", (f"{stem}.py",),
                files={f"{stem}.py": text})


def project_case(name: str, tree: str, entry: str) -> Case:
    """The project FIXTURES/`tree` as project/, converted from `entry` into project_ddp/."""
    return Case(name, f"project/{entry}", f"project_ddp/{entry}", (entry,),
                convert_cwd="project", trees={"project": FIXTURES / tree})


@dataclass
class Ran:
    """One process of a case: its exit ("0", "1", "timed out after 120 s", "not run...")."""

    exit: str
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int | None:
        return int(self.exit) if self.exit.lstrip("-").isdigit() else None

    def said(self, who: str) -> str:
        return f"{who}: exit {self.exit}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


@dataclass
class Result:
    """A case's outcome: convert's run, the original's, each rank's; its folder."""

    folder: Path
    convert: subprocess.CompletedProcess[str]
    single: Ran
    ranks: list[Ran]

    @property
    def conv(self) -> Path:
        return self.folder / "conv"

    def assert_single_ran(self) -> Ran:
        """The original exited 0 (as run_single asserts)."""
        assert self.single.returncode == 0, self.single.said("the original")
        return self.single

    def assert_two_ran(self) -> list[Ran]:
        """Every rank of the conversion exited 0 (as run_two asserts; no check)."""
        assert all(r.returncode == 0 for r in self.ranks), "\n".join(
            r.said(f"rank {i}") for i, r in enumerate(self.ranks))
        return self.ranks


class Batch:
    """The cases of one test module, run together once per session."""

    def __init__(self, name: str, cases: list[Case]) -> None:
        self.name = name
        self.cases = {c.name: c for c in cases}
        assert len(self.cases) == len(cases), "two cases of one name"

    def result(self, name: str) -> Result:
        from tests import reference

        assert reference.CACHE, "no session folder (tests/conftest.py sets it)"
        root = reference.CACHE[0].parent / "batches"
        root.mkdir(parents=True, exist_ok=True)
        folder = root / self.name
        with open(root / f"{self.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / "batch.json").exists():
                self._run(folder)
        return _read(folder / name, json.loads((folder / "batch.json").read_text()))

    def _run(self, folder: Path) -> None:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        cases = list(self.cases.values())
        with ThreadPoolExecutor(2) as pool:  # a process each, two at a time
            ok = list(pool.map(lambda c: _convert(c, folder / c.name), cases))
        converted = [c for c, done in zip(cases, ok, strict=True) if done]
        single = [_spec(folder / c.name, "orig", c.script, "single.pt", "64",
                        {**c.env, **c.single_env}) for c in converted]
        two = [_spec(folder / c.name, "conv", c.converted, "multi.pt", "32",
                     {**c.env, **c.two_env}) for c in converted]
        runs = {}
        for mode, cases in (("single", single), ("ranked", two)):
            spec = folder / f"{mode}.json"
            spec.write_text(json.dumps({"timeout": CASE_TIMEOUT, "cases": cases}, indent=1))
            limit = 60 + CASE_TIMEOUT * (len(cases) + 1)
            try:
                if mode == "single":
                    ran = run_cmd([sys.executable, str(ZYGOTE), mode, str(spec)], cwd=folder,
                                  timeout=limit)
                else:
                    ran = distrun("launch", "--nproc-per-node", "2", "--no-check",
                                  str(ZYGOTE), mode, str(spec), cwd=folder, timeout=limit)
                runs[mode] = {"returncode": ran.returncode, "stdout": ran.stdout,
                              "stderr": ran.stderr}
            except subprocess.TimeoutExpired as late:  # kept: not run again by each test
                runs[mode] = {"returncode": f"timed out after {limit} s",
                              "stdout": str(late.stdout), "stderr": str(late.stderr)}
        (folder / "batch.json").write_text(json.dumps(runs, indent=1))


def _spec(folder: Path, side: str, script: str, out: str, batch: str,
          env: Mapping[str, str]) -> dict[str, object]:
    """A zygote's case: `python FOLDER/SIDE/SCRIPT` from FOLDER/SIDE, BATCH_SIZE and
    OUT_PATH set as run_single and run_two set them, its output kept in FOLDER."""
    return {"cwd": str(folder / side), "script": str(folder / side / script),
            "env": {"BATCH_SIZE": batch, "OUT_PATH": str(folder / out), **env},
            "out": str(folder)}


def _convert(case: Case, folder: Path) -> bool:
    """The case's files in orig/ and conv/, converted in conv/ (convert.json: its run);
    whether it exited 0."""
    folder.mkdir()
    (folder / "case.json").write_text(json.dumps(case.spec(), indent=1))
    for side in ("orig", "conv"):
        (folder / side).mkdir()
        for rel, tree in case.trees.items():
            shutil.copytree(tree, folder / side / rel, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        for rel, text in case.files.items():
            (folder / side / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / side / rel).write_text(text)
    ran = distrun("convert", *case.convert, cwd=folder / "conv" / case.convert_cwd)
    (folder / "convert.json").write_text(json.dumps(
        {"returncode": ran.returncode, "stdout": ran.stdout, "stderr": ran.stderr}))
    return ran.returncode == 0


def _read(folder: Path, runs: dict[str, dict[str, object]]) -> Result:
    kept = json.loads((folder / "convert.json").read_text())
    convert = subprocess.CompletedProcess(["distrun", "convert"], kept["returncode"],
                                          kept["stdout"], kept["stderr"])
    return Result(folder, convert, _ran(folder, "single", runs["single"]),
                  [_ran(folder, f"rank{r}", runs["ranked"]) for r in (0, 1)])


def _ran(folder: Path, tag: str, run: Mapping[str, object]) -> Ran:
    """The process's kept output; where it has no exit code, the batch's own run's."""
    def text(suffix: str) -> str:
        path = folder / f"{tag}.{suffix}"
        return path.read_text(errors="replace") if path.exists() else ""

    if (folder / f"{tag}.exit").exists():
        return Ran(text("exit").strip(), text("stdout"), text("stderr"))
    return Ran(f"not run (the batch's run: exit {run['returncode']})", text("stdout"),
               text("stderr") + f"--- the batch's run\n{run['stdout']}\n{run['stderr']}")
