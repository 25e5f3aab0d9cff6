"""The root command and what every command shares: `distrun` alone, "did you mean" for a
mistyped command or script, errors as JSON when JSON was asked for, colour only on a
terminal (NO_COLOR respected), shell completion, and convert's next steps."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from distrun.cli import main, render
from distrun.doctor import CheckResult
from tests.conftest import ROOT, distrun

EXAMPLE = ROOT / "examples" / "mnist_like.py"
ANSI = "\x1b["


def test_distrun_alone_prints_the_help_and_exits_0() -> None:
    result = distrun()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: distrun")
    assert "convert" in result.stdout and "launch" in result.stdout
    assert "error" not in result.stderr


@pytest.mark.parametrize(("typed", "meant"), [("conver", "convert"), ("lanch", "launch"),
                                              ("doctr", "doctor"), ("confg", "config")])
def test_a_mistyped_command_names_the_closest(typed: str, meant: str) -> None:
    result = distrun(typed)
    assert result.returncode == 2
    assert f"no such command '{typed}'" in result.stderr
    assert f"did you mean 'distrun {meant}'?" in result.stderr


def test_an_unknown_command_lists_the_commands() -> None:
    result = distrun("xyzzy")
    assert result.returncode == 2
    assert "config, convert, doctor, launch" in result.stderr


@pytest.mark.parametrize("command", ["convert", "launch"])
def test_a_mistyped_script_names_the_closest_file(tmp_path: Path, command: str) -> None:
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    result = distrun(command, "trian.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "trian.py: no such file" in result.stderr
    assert "did you mean train.py?" in result.stderr


@pytest.mark.parametrize("argv", [
    ["convert", "--report", "json", "missing.py"],
    ["config", "validate", "--json", "missing.yaml"],
    ["config", "show", "--json", "missing.yaml"],
    ["doctor", "--json", "--config", "missing.yaml"],
])
def test_an_error_is_a_json_object_on_stdout_when_json_was_asked(tmp_path: Path,
                                                                 argv: list[str]) -> None:
    result = distrun(*argv, cwd=tmp_path)
    assert result.returncode == 2
    record = json.loads(result.stdout)
    assert record["error"]["exit_code"] == 2
    assert "missing" in record["error"]["message"]
    assert "distrun: error:" in result.stderr  # the text is still there for a person


def test_no_json_error_without_json() -> None:
    result = distrun("convert", "missing.py")
    assert result.returncode == 2 and result.stdout == ""


def test_launch_report_json_holds_the_error_when_nothing_started(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = distrun("launch", "--report-json", str(report), "missing.py", cwd=tmp_path)
    assert result.returncode == 2
    record = json.loads(report.read_text())
    assert record["exit_code"] == 2 and record["reason"] == "error"
    assert "missing.py: no such file" in record["error"]["message"]


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What distrun ARGS writes to a terminal (a pseudo-terminal as stdout and stderr)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "distrun", *args], stdout=terminal,
                            stderr=terminal, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TERM": "xterm", **env})
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 4096)
        except OSError:  # the terminal's other end closed: the process ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(controller)
    return b"".join(chunks).decode(errors="replace")


def _clean_env() -> dict[str, str]:
    return {"NO_COLOR": "", "FORCE_COLOR": ""}


def test_errors_are_coloured_on_a_terminal_only() -> None:
    on_terminal = _on_a_terminal(["convert", "missing.py"], _clean_env())
    assert "missing.py: no such file" in on_terminal
    assert ANSI in on_terminal
    piped = distrun("convert", "missing.py", env=_clean_env())
    assert ANSI not in piped.stderr


def test_no_color_turns_colour_off_even_on_a_terminal() -> None:
    text = _on_a_terminal(["convert", "missing.py"], {"NO_COLOR": "1", "FORCE_COLOR": ""})
    assert "missing.py: no such file" in text
    assert ANSI not in text


def test_force_color_colours_a_pipe_but_no_color_wins() -> None:
    assert ANSI in distrun("convert", "missing.py", env={"FORCE_COLOR": "1",
                                                         "NO_COLOR": ""}).stderr
    assert ANSI not in distrun("convert", "missing.py", env={"FORCE_COLOR": "1",
                                                             "NO_COLOR": "1"}).stderr


def test_shell_completion_as_the_readme_shows_it() -> None:
    script = distrun(env={"_DISTRUN_COMPLETE": "bash_source"})
    assert script.returncode == 0 and "_distrun_completion" in script.stdout
    words = distrun(env={"_DISTRUN_COMPLETE": "bash_complete", "COMP_WORDS": "distrun con",
                         "COMP_CWORD": "1"})
    assert words.returncode == 0
    assert "config" in words.stdout and "convert" in words.stdout
    options = distrun(env={"_DISTRUN_COMPLETE": "bash_complete",
                           "COMP_WORDS": "distrun launch --nproc", "COMP_CWORD": "2"})
    assert "--nproc-per-node" in options.stdout


@pytest.mark.parametrize("target", ["ddp", "fsdp", "accelerate"])
def test_convert_ends_with_the_launch_command_and_the_batch_note(target: str,
                                                                 tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    result = distrun("convert", "train.py", "--to", target, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip().splitlines()
    assert lines[-2].startswith("next: distrun launch --nproc-per-node ")
    command = lines[-2].removeprefix("next: ").split("   #")[0]
    assert command.split()[-1] == f"train_{target}.py"
    assert lines[-1].startswith("batch: each process reads batch_size samples per step")
    # the command printed is one that runs: try it as --dry-run
    dry = distrun(*command.split()[1:2], "--dry-run", *command.split()[2:], cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr


def test_convert_prints_no_next_step_when_nothing_was_written(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    for args in (["--diff"], ["--check"], ["-o", "-"], ["--report", "json"]):
        result = distrun("convert", "train.py", *args, cwd=tmp_path)
        assert "next: distrun launch" not in result.stdout + result.stderr, args


def test_counts_are_plural_only_when_more_than_one() -> None:
    one = [CheckResult("a", "ok", ""), CheckResult("b", "warn", "")]
    assert render.doctor_summary(one) == "1 ok, 1 warning, 0 failed, 0 skipped"
    two = [*one, CheckResult("c", "warn", "")]
    assert "2 warnings" in render.doctor_summary(two)


def test_a_diff_is_coloured_only_when_colour_is_on(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    plain = distrun("convert", "train.py", "--diff", cwd=tmp_path, env=_clean_env())
    assert plain.stdout.startswith("--- a/train.py") and ANSI not in plain.stdout
    coloured = distrun("convert", "train.py", "--diff", cwd=tmp_path,
                       env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert "\x1b[32m+" in coloured.stdout and "\x1b[36m@@" in coloured.stdout



@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def _entry(argv: tuple[str, ...]) -> None:
    main(list(argv))


def test_json_errors_apply_to_the_command_that_asked_only() -> None:
    """In one process (as under CliRunner), a command run after one that asked for JSON
    prints its error as text only."""
    runner = CliRunner()
    first = runner.invoke(_entry, ["convert", "--report", "json", "missing.py"])
    assert first.exit_code == 2 and json.loads(first.stdout)["error"]
    second = runner.invoke(_entry, ["convert", "missing.py"])
    assert second.exit_code == 2 and second.stdout == ""


def test_a_convert_report_colours_severities_and_fixes_only_when_colour_is_on(
        tmp_path: Path) -> None:
    shutil.copy(ROOT / "tests/convert/fixtures/hazards/batchnorm_download_iterable.py",
                tmp_path / "train.py")
    plain = distrun("convert", "train.py", "-o", "out.py", cwd=tmp_path, env=_clean_env())
    assert "train.py:10: warning: `Stream` is an IterableDataset" in plain.stdout
    assert ANSI not in plain.stdout
    coloured = distrun("convert", "train.py", "-o", "out2.py", cwd=tmp_path,
                       env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert "train.py:10: \x1b[33m\x1b[1mwarning:\x1b[0m `Stream`" in coloured.stdout
    assert "\n    \x1b[32mfix:\x1b[0m in __iter__" in coloured.stdout

