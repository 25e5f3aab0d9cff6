"""The manual and distrun agree: every `distrun ...` line of the code blocks of README.md
and of the pages under docs/ (docs/targets/ too) names a command and options that exist
(synopses included), and every one that can run here is run, once even when several
pages show it, in a fresh folder holding the manual's own files (train.py, the
train_ddp.py that `distrun convert` makes of it, the example distrun.yaml of
docs/config.md); where a page shows a command's whole output, the output is compared.

A command that cannot run here is listed with the reason (other machines, GPUs, files
the pages only show). A new command in a page runs by default: if it cannot run here,
give it a reason in `_why_not`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest

from distrun.cli import cli, term
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
EXAMPLE = ROOT / "examples" / "mnist_like.py"
PLACEHOLDERS = re.compile(r"^(?:OPTIONS|SCRIPT|SCRIPT_ARGS|MODULE|ARGS|FILE|OUT|N|M|S|L|H|P|K|"
                          r"HOST|PORT|flags)\b")
# Commands whose whole output a page shows: compared line by line.
EXACT = ("distrun config init --non-interactive",)


def pages() -> list[Path]:
    """README.md and every page of the manual, in a fixed order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


@dataclass
class Shown:
    line: str  # the command as a page writes it (without `$ ` and comments)
    where: str  # the first page that shows it, relative to the repository
    output: list[str] = field(default_factory=list)  # what a page shows it printing


def documented_commands() -> list[Shown]:
    """Every `distrun ...` line of the pages' code blocks, in order, once each."""
    found: dict[str, Shown] = {}
    for page in pages():
        where = str(page.relative_to(ROOT))
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
            current: Shown | None = None  # the command whose output the lines are
            for raw in block.splitlines():
                prompt = re.match(r"^\s*(?:\S*\$ )", raw)
                line = raw[prompt.end():] if prompt else raw
                if line.startswith("distrun "):
                    words = shlex.split(line, comments=True)
                    shown = found.setdefault(shlex.join(words), Shown(shlex.join(words), where))
                    # a `$ ` line's output follows it; the first page that shows one counts
                    current = shown if prompt and not shown.output else None
                elif prompt:
                    current = None
                elif current is not None:
                    current.output.append(raw)
    return list(found.values())


COMMANDS = documented_commands()


def _command(words: list[str], where: str) -> tuple[click.Command, list[str]]:
    """The click command a page's line names, and the words after its name."""
    ctx = click.Context(cli)
    command = cli.get_command(ctx, words[1])
    assert command is not None, f"{where}: `distrun {words[1]}` is no distrun command"
    rest = words[2:]
    if isinstance(command, click.Group):
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"{where}: `distrun {words[1]} {rest[0]}` does not exist"
        command, rest = sub, rest[1:]
    return command, rest


def _options_used(command: click.Command, rest: list[str]) -> list[str]:
    """The option names a page's line gives the command (before the script, for launch:
    what follows it is the script's)."""
    takes_value = {opt for p in command.params if isinstance(p, click.Option) and not p.is_flag
                   for opt in p.opts}
    used = []
    skip = False
    for word in rest:
        if skip:
            skip = False
            continue
        for part in word.strip("[]").split("|"):
            part = part.strip("[]")
            if part.startswith("-") and part not in ("-", "--"):
                name = part.split("=")[0]
                used.append(name)
                skip = name in takes_value and "=" not in part and "[" not in word
            elif command.name == "launch" and part and not PLACEHOLDERS.match(part) \
                    and part != ">":
                return used  # the script: the rest is its own
            elif command.name == "launch" and part in ("SCRIPT", "MODULE"):
                return used
    return used


@pytest.mark.parametrize("shown", COMMANDS, ids=[c.line[:60] for c in COMMANDS])
def test_docs_name_real_commands_and_options(shown: Shown) -> None:
    words = shlex.split(shown.line)
    if ">" in words:
        words = words[:words.index(">")]
    command, rest = _command(words, shown.where)
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    known |= {"-h", "--help"}
    unknown = [o for o in _options_used(command, rest) if o not in known]
    assert not unknown, f"{shown.where}: `{shown.line}`: {unknown} not among {sorted(known)}"
    if (_why_not(words, ROOT) or "").startswith("a synopsis"):
        return
    try:  # a real command line: click parses it as the command would
        command.parse_args(click.Context(command, info_name=words[1],
                                         **command.context_settings), list(rest))
    except click.UsageError as err:
        pytest.fail(f"{shown.where}: `{shown.line}`: {err.format_message()}")
    finally:
        term.json_errors.on, term.json_errors.report_file = False, None


def _why_not(words: list[str], folder: Path) -> str | None:
    """Why a documented command cannot run here (None: it can)."""
    line = shlex.join(words)
    if any("[" in w or "|" in w or PLACEHOLDERS.fullmatch(w.strip("[].")) for w in words[1:]):
        return "a synopsis, not a command (its options are checked above)"
    if re.search(r"\b10\.0\.0\.\d+|\bnode\d\b", line):
        return "needs other machines (node 0 at another address)"
    if "--launcher deepspeed" in line:
        return "DeepSpeed's launcher (run by tests/launch/test_deepspeed_launcher.py)"
    if "--launcher ray" in line:  # a Ray cluster's start is ~40 s of this machine's CPU
        return "Ray Train's launcher (run by tests/launch/test_ray_launcher.py)"
    nproc = re.search(r"--nproc-per-node (\d+)", line)
    if nproc and int(nproc[1]) > 2:
        return f"{nproc[1]} processes: GPUs, or more cores than a test machine has"
    if words[1:3] == ["config", "init"] and "--non-interactive" not in words:
        return "asks questions (tests/config/test_init_and_carry.py answers them)"
    if "--format deepspeed" in line:
        return "needs a deepspeed: section (tests/config/test_deepspeed_export.py)"
    outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--output", ">")}
    for word in words[2:]:
        if (word.endswith((".py", ".json", ".yaml", ".ipynb")) and word not in outputs
                and not (folder / word).exists()):
            return f"needs {word}, which the docs only show"
    return None


@pytest.fixture(scope="module")
def docs_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train.py, train_ddp.py made of it, and the example distrun.yaml of the manual."""
    folder = tmp_path_factory.mktemp("docs")
    shutil.copy(EXAMPLE, folder / "train.py")
    subprocess.run([sys.executable, "-m", "distrun", "convert", "train.py"], cwd=folder,
                   check=True, capture_output=True)
    examples = [found[1] for page in pages()
                for found in re.finditer(r"^```yaml\n(# a two-node job.*?)^```",
                                         page.read_text(encoding="utf-8"), re.S | re.M)]
    assert len(examples) == 1, "the manual's example distrun.yaml (docs/config.md) is gone"
    (folder / "distrun.yaml").write_text(examples[0])
    return folder


@pytest.mark.e2e
@pytest.mark.parametrize("shown", COMMANDS, ids=[c.line[:60] for c in COMMANDS])
def test_documented_command_runs_here(shown: Shown, docs_files: Path, tmp_path: Path) -> None:
    folder = tmp_path / "work"
    shutil.copytree(docs_files, folder)
    words = shlex.split(shown.line)
    reason = _why_not(words, folder)
    if reason:
        pytest.skip(reason)
    if words[1:3] == ["config", "init"]:
        (folder / "distrun.yaml").unlink()  # it writes one: as in a new project
    into = None
    if ">" in words:
        into, words = folder / words[words.index(">") + 1], words[:words.index(">")]
    with open("/dev/null") as nothing:
        run = subprocess.run([sys.executable, "-m", "distrun", *words[1:]], cwd=folder,
                             stdin=nothing, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "NO_COLOR": "1"})
    said = run.stdout + run.stderr
    assert run.returncode not in (2, 70), \
        f"{shown.where}: `{shown.line}` exit {run.returncode}:\n{said}"
    assert "Traceback" not in said, said
    if into is not None:
        into.write_text(run.stdout)
        assert run.stdout.strip(), f"`{shown.line}` printed nothing to redirect"
    if shown.line.startswith(EXACT):
        assert said.splitlines() == shown.output, \
            f"{shown.where} shows:\n{shown.output}\ngot:\n{said}"
