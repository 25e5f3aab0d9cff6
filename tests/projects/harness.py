"""End-to-end harness of the real-projects corpus (tests/projects/).

Each project folder holds `upstream/` (files of a public repository, verbatim),
`project.yaml` (the descriptor) and optionally `shim/` and fixture files. A run:

1. `run_single`: copy upstream/ to TMP/orig, create the project's data there, run the
   entry script on one process with the shim on PYTHONPATH and the single-run arguments
   (batch N);
2. `convert_project`: copy upstream/ to TMP/conv and convert it with distrun;
3. `run_two`: `python -m distrun launch --nproc-per-node 2 ENTRY ...` in TMP/conv with
   the two-process arguments (N/2 per rank);
4. `compare`: the converted run's checkpoints have the original's keys (no `module.`
   prefix), load into the original model class in a plain process, and (where the
   descriptor says `exact: true`) hold the original's weights within 1e-5.

A Jupyter notebook as the entry (`entry: path/NAME.ipynb`, or `notebook: true`): the
original runs as `NAME_cells.py`, the notebook's code cells joined by the harness's own
minimal extraction (`notebook_cells`, independent of distrun's) and written beside it;
`distrun convert NAME.ipynb` writes `NAME_ddp.py` beside it, which the 2 processes run.

By hand (from the repository root; tests/projects/__main__.py):

    .venv/bin/python -m tests.projects --all          # a table of every project
    .venv/bin/python -m tests.projects vae mnist      # some projects
    .venv/bin/python -m tests.projects vae --keep     # keep the run folder

Only the standard library and PyYAML are imported at module level: the compare worker
(compare_worker.py) runs in its own process, beside the project's modules.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from distrun.convert.request import detect_input
from tests.projects.notebook import notebook_cells

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHARED_SHIM = HERE / "shim"
TOLERANCE = 1e-5
RUN_TIMEOUT = 300

REQUIRED_KEYS = ("name", "source", "entry", "single", "two", "checkpoints", "exact",
                 "exact_reason", "styles", "expected_trouble", "today")
SOURCE_KEYS = ("repository", "commit", "license", "files")


# --------------------------------------------------------------------------- descriptors

@dataclass
class Project:
    name: str
    folder: Path
    spec: dict[str, Any] = field(repr=False)

    @property
    def upstream(self) -> Path:
        return self.folder / "upstream"

    @property
    def upstream_present(self) -> bool:
        """Whether upstream/ is in this checkout. The projects added for issue 25 keep
        their upstream files out of git (their folder's .gitignore): the descriptor
        records repository, commit, paths and sha256, and `python -m tests.projects
        --materialize NAME --git-dir DIR` writes them from a clone of the repository."""
        return self.upstream.is_dir() and any(p.is_file() for p in self.upstream.rglob("*"))

    @property
    def entry(self) -> str:
        return str(self.spec["entry"])

    @property
    def workdir(self) -> str:
        return str(self.spec.get("workdir", "."))

    @property
    def entry_in_workdir(self) -> str:
        return os.path.relpath(self.entry, self.workdir)

    @property
    def is_notebook(self) -> bool:
        return bool(self.spec.get("notebook")) or self.entry.endswith(".ipynb")

    def _beside_entry(self, suffix: str) -> str:
        entry = Path(self.entry)
        return (entry.parent / f"{entry.stem}{suffix}").as_posix()

    @property
    def single_script(self) -> str:
        """What the 1-process run starts: the entry, or a notebook's `NAME_cells.py`."""
        return self._beside_entry("_cells.py") if self.is_notebook else self.entry

    @property
    def two_script(self) -> str:
        """What the 2-process run starts: the converted entry, or a notebook's
        `NAME_ddp.py` (written by `distrun convert NAME.ipynb` beside it)."""
        return self._beside_entry("_ddp.py") if self.is_notebook else self.entry

    def in_workdir(self, path: str) -> str:
        return os.path.relpath(path, self.workdir)

    @property
    def exact(self) -> bool:
        return bool(self.spec["exact"])

    @property
    def today(self) -> dict[str, Any]:
        return dict(self.spec["today"])

    def shim_paths(self) -> list[Path]:
        """Shim folders for PYTHONPATH: the project's own first, then the shared one."""
        own = [self.folder / p for p in self.spec.get("shims", [])]
        return [*own, SHARED_SHIM]


def load(name: str) -> Project:
    folder = HERE / name
    spec = yaml.safe_load((folder / "project.yaml").read_text())
    return Project(name=name, folder=folder, spec=spec)


def names() -> list[str]:
    return sorted(p.parent.name for p in HERE.glob("*/project.yaml"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def descriptor_problems(project: Project) -> list[str]:
    """What is missing or wrong in a descriptor and its upstream files."""
    spec, problems = project.spec, []
    problems += [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in spec]
    source = spec.get("source", {})
    problems += [f"missing source.{k}" for k in SOURCE_KEYS if not source.get(k)]
    if len(str(source.get("commit", ""))) != 40:
        problems.append("source.commit is not a 40-digit sha")
    files = source.get("files", {}) or {}
    for rel, digest in files.items():
        path = project.upstream / rel
        if not path.is_file():
            problems.append(f"upstream file missing: {rel}")
        elif sha256(path) != digest:
            problems.append(f"upstream file changed (sha256 differs): {rel}")
    on_disk = {p.relative_to(project.upstream).as_posix()
               for p in project.upstream.rglob("*") if p.is_file()}
    problems += [f"file in upstream/ not listed in source.files: {p}"
                 for p in sorted(on_disk - set(files))]
    if spec.get("entry") and spec["entry"] not in files:
        problems.append("entry is not one of the upstream files")
    for key in ("single", "two"):
        if not isinstance(spec.get(key, {}).get("args"), list):
            problems.append(f"{key}.args must be a list")
    if not spec.get("checkpoints"):
        problems.append("no checkpoint to compare")
    for ckpt in spec.get("checkpoints", []):
        if "path" not in ckpt:
            problems.append("a checkpoint without path")
        if "model" not in ckpt and "model_note" not in ckpt:
            problems.append(f"checkpoint {ckpt.get('path')}: neither model nor model_note")
    today = spec.get("today", {})
    if today.get("status") not in ("pass", "xfail"):
        problems.append("today.status must be pass or xfail")
    if today.get("status") == "xfail" and not today.get("reason"):
        problems.append("today.status xfail needs a reason")
    if not isinstance(spec.get("exact"), bool):
        problems.append("exact must be true or false")
    return problems


def materialize(project: Project, git_dir: Path) -> list[str]:
    """Writes the descriptor's upstream files into upstream/ from a clone of its
    repository (`git --git-dir GIT_DIR show COMMIT:PATH`) and checks their sha256.
    Returns the problems (an empty list: every file is there, byte for byte)."""
    source, problems = project.spec["source"], []
    for rel, digest in (source.get("files") or {}).items():
        shown = subprocess.run(["git", "--git-dir", str(git_dir), "show",
                                f"{source['commit']}:{rel}"], capture_output=True)
        if shown.returncode != 0:
            problems.append(f"{rel}: {shown.stderr.decode(errors='replace').strip()}")
            continue
        if hashlib.sha256(shown.stdout).hexdigest() != digest:
            problems.append(f"{rel}: sha256 differs from the descriptor's")
            continue
        dest = project.upstream / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(shown.stdout)
    return problems


# --------------------------------------------------------------------------- set-up steps

def _words(rng: Any, n: int, vocab: list[str]) -> list[str]:
    return [vocab[int(i)] for i in rng.integers(0, len(vocab), n)]


def _setup(project: Project, run_root: Path, run: str) -> None:
    """Creates the project's data (and copies its fixtures) inside the run folder of `run`
    ("single" or "two")."""
    for step in project.spec.get("setup", []) or []:
        kind = step["kind"]
        if kind == "copy":
            dest = run_root / step["to"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(project.folder / step["from"], dest)
        elif kind == "text_corpus":
            import numpy as np

            rng = np.random.default_rng(step.get("seed", 0))
            vocab = [f"w{i}" for i in range(step.get("vocab", 50))]
            folder = run_root / step["dir"]
            folder.mkdir(parents=True, exist_ok=True)
            for split, lines in step["lines"].items():
                text = "\n".join(" ".join(_words(rng, 12, vocab)) for _ in range(lines))
                (folder / f"{split}.txt").write_text(text + "\n")
        elif kind == "npy_images":
            import numpy as np

            rng = np.random.default_rng(step.get("seed", 0))
            folder = run_root / step["dir"]
            folder.mkdir(parents=True, exist_ok=True)
            shape = tuple(step["shape"])
            high = step.get("high", 256)
            for i in range(step["count"]):
                name = step.get("name", "img{i:03d}.npy").format(i=i)
                array = rng.integers(0, high, shape).astype(np.uint8)
                with open(folder / name, "wb") as f:
                    np.save(f, array)
        elif kind == "python":
            # a data-making script of the project folder (`script`), run with the
            # harness's interpreter in the run folder: fake data sets of odd formats
            # `two_args`: the two-process run's arguments, where its data differs (a batch
            # size the script hard-codes: the harness cannot halve it)
            given = step.get("two_args", step.get("args", [])) if run == "two" \
                else step.get("args", [])
            subprocess.run([sys.executable, str(project.folder / step["script"]),
                            *map(str, given)],
                           cwd=run_root, check=True, capture_output=True, text=True,
                           timeout=120)
        elif kind == "mkdir":
            (run_root / step["dir"]).mkdir(parents=True, exist_ok=True)
        else:
            raise ValueError(f"{project.name}: unknown setup step {kind!r}")


def _copy_upstream(project: Project, dest: Path, run: str) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(project.upstream, dest)
    _setup(project, dest, run)
    return dest


def _env(project: Project, run_root: Path, extra: dict[str, Any] | None = None
         ) -> dict[str, str]:
    paths = [str(p) for p in project.shim_paths()]
    paths += [str(run_root / p) for p in project.spec.get("pythonpath", [])]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    bin_dirs = [str(project.folder / p) for p in project.spec.get("path", [])]
    if bin_dirs:
        env["PATH"] = os.pathsep.join([*bin_dirs, env.get("PATH", "")])
    for key, value in {**project.spec.get("env", {}), **(extra or {})}.items():
        env[key] = str(value)
    return env


def _with_distrun(env: dict[str, str]) -> dict[str, str]:
    """The environment for a `python -m distrun` command: this checkout's distrun first
    (not another one installed in the interpreter running the tests)."""
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), env["PYTHONPATH"]])}


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# --------------------------------------------------------------------------- the four steps

def run_single(project: Project, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The original project on one process (batch N), in TMP/orig. A notebook runs as
    its code cells (`notebook_cells`) written to NAME_cells.py beside it, so that the
    script's folder (sys.path[0]) is the notebook's, as for the converted NAME_ddp.py.
    With `resume: {single: ARGS}` a second run follows in the same folder (train, then
    resume from the first run's checkpoint); so does run_two's with `resume.two`."""
    root = _copy_upstream(project, tmp / "orig", "single")
    if project.is_notebook:
        cells = notebook_cells((root / project.entry).read_bytes())
        (root / project.single_script).write_text(cells)
    spec = project.spec["single"]
    env = _env(project, root, spec.get("env"))
    args = [sys.executable, project.in_workdir(project.single_script), *map(str, spec["args"])]
    first = _run(args, root / project.workdir, env)
    resume = (project.spec.get("resume") or {}).get("single")
    if first.returncode != 0 or resume is None:
        return first
    args = [sys.executable, project.in_workdir(project.single_script), *map(str, resume)]
    return _then(first, _run(args, root / project.workdir, env))


def _then(first: subprocess.CompletedProcess[str], second: subprocess.CompletedProcess[str]
          ) -> subprocess.CompletedProcess[str]:
    """A train-then-resume pair of runs as one result: both outputs, the second's exit."""
    return subprocess.CompletedProcess(
        second.args, second.returncode, first.stdout + "\n== resumed run ==\n" + second.stdout,
        first.stderr + "\n== resumed run ==\n" + second.stderr)


def convert_project(project: Project, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Converts the project into TMP/conv: a copy of upstream/ converted in place by
    project mode (`distrun convert ENTRY --in-place`: the entry and every local module it
    imports; a folder on the descriptor's `pythonpath`, where an installed package of the
    repository lives, is given as `--root`). A notebook: `distrun convert NAME.ipynb`,
    which writes NAME_ddp.py beside it (the notebook itself is left as it is); a notebook
    importing modules of its folder is a project: converted `--in-place` like a script,
    its modules rewritten, NAME_ddp.py written beside it."""
    root = _copy_upstream(project, tmp / "conv", "two")
    env = _with_distrun(_env(project, root))
    if project.is_notebook and detect_input(str(root / project.entry)) == "notebook":
        args = [sys.executable, "-m", "distrun", "convert", str(root / project.entry),
                *map(str, project.spec.get("convert_args", []))]
        return _run(args, root, env)
    # a script, or a notebook importing modules of its folder (project mode: its modules
    # rewritten in place, NAME_ddp.py beside the notebook)
    roots = [arg for p in project.spec.get("pythonpath", []) for arg in ("--root", str(root / p))]
    args = [sys.executable, "-m", "distrun", "convert", str(root / project.entry),
            "--in-place", "--no-backup", *roots,
            *map(str, project.spec.get("convert_args", []))]
    return _run(args, root, env)


def run_two(project: Project, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The converted project on 2 processes (N/2 per rank), in TMP/conv, under
    `distrun launch --check` (a finding is exit code 3: a converter bug). `two.timeout`
    (default 240) is launch's --timeout: seconds without output from any rank before the
    job is stopped (a project whose converted run is known to hang keeps it short)."""
    root = tmp / "conv"
    spec = project.spec["two"]
    env = _with_distrun(_env(project, root, spec.get("env")))

    def launch(script_args: list[Any], logs: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-m", "distrun", "launch", "--nproc-per-node", "2",
                "--timeout", str(spec.get("timeout", 240)),
                "--log-dir", str(tmp / logs), "--check",
                project.in_workdir(project.two_script), *map(str, script_args)]
        return _run(args, root / project.workdir, env)

    first = launch(spec["args"], "launch-logs")
    resume = (project.spec.get("resume") or {}).get("two")
    if first.returncode != 0 or resume is None:
        return first
    return _then(first, launch(resume, "launch-logs-resume"))


@dataclass
class Comparison:
    ok: bool
    lines: list[str]

    def __str__(self) -> str:
        return "\n".join(self.lines)


def compare(project: Project, tmp: Path) -> Comparison:
    """Checks the converted run's checkpoints against the original's (in a subprocess)."""
    root = tmp / "orig"
    job = {
        "orig": str(tmp / "orig" / project.workdir),
        "conv": str(tmp / "conv" / project.workdir),
        "checkpoints": project.spec["checkpoints"],
        "exact": project.exact,
        "tolerance": TOLERANCE,
        "argv": [project.in_workdir(project.single_script),
                 *map(str, project.spec["single"]["args"])],
    }
    env = _env(project, root, project.spec["single"].get("env"))
    env.pop("DISTRUN_SHIM_CAPTURE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root / project.workdir), env["PYTHONPATH"]])
    result = _run([sys.executable, str(HERE / "compare_worker.py"), json.dumps(job)],
                  root / project.workdir, env)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0:
        lines.append(f"compare worker failed (exit {result.returncode}):")
        lines += result.stderr.strip().splitlines()[-15:]
    ok = result.returncode == 0 and bool(lines) and lines[-1] == "COMPARE OK"
    return Comparison(ok, lines)


# --------------------------------------------------------------------------- one whole run

@dataclass
class Outcome:
    name: str
    single: subprocess.CompletedProcess[str] | None = None
    convert: subprocess.CompletedProcess[str] | None = None
    two: subprocess.CompletedProcess[str] | None = None
    comparison: Comparison | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (self.single is not None and self.single.returncode == 0
                and self.convert is not None and self.convert.returncode == 0
                and self.two is not None and self.two.returncode == 0
                and self.comparison is not None and self.comparison.ok)

    def failure(self) -> str:
        """The first step that failed, with the end of its output."""
        for step, result in (("single run", self.single), ("convert", self.convert),
                             ("two-process run", self.two)):
            if result is None:
                if step == "two-process run" and self.comparison is not None:
                    return f"convert's report:\n{self.comparison}"
                return f"{step}: not run"
            if result.returncode != 0:
                tail = (result.stdout + result.stderr).strip().splitlines()[-30:]
                return f"{step} exited {result.returncode}:\n" + "\n".join(tail)
        if self.comparison is None:
            return "compare: not run"
        return "" if self.comparison.ok else f"compare:\n{self.comparison}"


def report_problems(project: Project, convert: subprocess.CompletedProcess[str]) -> list[str]:
    """Lines of the descriptor's `report_must_not_contain` found in convert's report: what
    the conversion must not leave to a warning for the project to count as converted
    (e.g. "no DataLoader found" where every rank would then train on everything and the
    comparison cannot be exact enough to see it)."""
    report = convert.stdout + convert.stderr
    return [f"convert's report says {text!r}"
            for text in project.spec.get("report_must_not_contain", []) or []
            if text in report]


def run_all_steps(project: Project, tmp: Path) -> Outcome:
    """run_single, convert_project, run_two, compare; stops at the first failure."""
    out = Outcome(project.name)
    for step, fn in (("single", run_single), ("convert", convert_project), ("two", run_two)):
        start = time.monotonic()
        result = fn(project, tmp)
        out.seconds[step] = time.monotonic() - start
        setattr(out, step, result)
        if result.returncode != 0:
            return out
        if step == "convert" and report_problems(project, result):
            out.comparison = Comparison(False, report_problems(project, result))
            return out
    start = time.monotonic()
    out.comparison = compare(project, tmp)
    out.seconds["compare"] = time.monotonic() - start
    return out
