"""distrun.yaml under bad input: whatever the file holds, loading it gives a config or a
list of problems (each with a line and a message), never another exception; what it
accepts has the types the schema promises; tags build nothing; and the work and memory
spent on a crafted file (an alias or merge-key bomb, 10,000 levels of nesting, 1 MiB of
values) stay bounded.

Hypothesis runs derandomized (the same examples on every run, no example database)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distrun.config.exports import FORMATS, export, request_from
from distrun.config.load import MAX_BYTES, Config, load, parse
from distrun.config.schema import KEYS, NPROC_WORDS, Key
from distrun.errors import DistrunError
from tests.conftest import ROOT

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Every key of the file as it is written ("rdzv.endpoint"), with its description.
PATHS: dict[str, Key] = {}
for _name, _key in KEYS.items():
    if _key.kind == "section":
        PATHS.update({f"{_name}.{sub}": k for sub, k in _key.keys.items()})
    else:
        PATHS[_name] = _key

# Words YAML 1.1 reads as something other than text, and values close to valid ones.
TRICKY_WORDS = [
    "yes", "no", "on", "off", "y", "n", "true", "False", "TRUE", "~", "null", "Null", "",
    "0x1F90", "0o17", "017", "0b101", "1_000", "1:30", "+12", "-0", ".nan", ".NaN", "-.inf",
    ".inf", "1e400", "1.0e+400", "1.5", "2:4", "0:0", "4:2", "1:99999999999", "auto", "gpu",
    "cpu", "torchrun", "accelerate", "fp16", "bf16", "c10d", "static", "127.0.0.1:29500",
    "host:", ":1", "01:00:00", "1-00:00:00", "distrun-job", "Never", "2001-12-14",
    "=", "<<", "-", "?", "\\0", "\0", "\ud800", "a\nb",
]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(),
    st.integers(min_value=-(10 ** 80), max_value=10 ** 80),
    st.floats(allow_nan=True, allow_infinity=True), TEXT, st.sampled_from(TRICKY_WORDS),
)
KEY_NAMES = st.one_of(st.sampled_from(sorted(PATHS) + sorted(KEYS)), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEY_NAMES, inner, max_size=4)),
    max_leaves=16)

# Pieces of YAML syntax, glued at random into text the scanner and parser must survive.
FRAGMENTS = [
    "[", "]", "{", "}", ",", ": ", ":", "- ", "? ", "\n", "\n  ", "\n    ", "  ", "\t", "'",
    '"', "# c", "---\n", "...\n", "| \n", "> \n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n",
    "&a ", "&b ", "*a", "*b", "<<: ", "<<: *a", "!!python/object/apply:os.system ", "!!str ",
    "!!int ", "!!float ", "!!bool ", "!!null ", "!!binary ", "!!set ", "!!omap ", "!foo ",
    "!<tag:yaml.org,2002:str> ", "! ", "\\x00", "\\ud800", "\ufeff", "\x85", "\u2028",
    *sorted(KEYS), "endpoint", "backend", "NAME", *TRICKY_WORDS,
]
RAW_YAML = st.lists(st.one_of(st.sampled_from(FRAGMENTS), TEXT), max_size=40).map("".join)


def checked(config: Config) -> Config:
    """What every loaded config must satisfy, valid or not."""
    assert isinstance(config, Config)
    for problem in config.problems:
        assert problem.severity in ("error", "warning")
        assert isinstance(problem.line, int) and problem.line >= 1
        assert problem.message and len(problem.message) <= 500, problem.message
        problem.message.encode("utf-8")  # printable on a UTF-8 terminal (no lone surrogate)
        json.dumps(problem.key)
    assert len(config.problems) <= 101
    if config.valid:
        resolved = config.resolved()
        for path, key in PATHS.items():
            section, _, sub = path.rpartition(".")
            value = resolved[section][sub] if section else resolved[path]
            assert conforms(key, value), (path, value)
        request_from(config)
        for fmt in FORMATS:  # an export renders or refuses (no image, no script), no crash
            try:
                export(config, fmt)
            except DistrunError as err:
                assert err.message
    return config


def conforms(key: Key, value: Any) -> bool:
    """Whether a value the loader accepted has the type and range the schema promises."""
    if value is None:
        return key.default is None
    if key.kind == "bool":
        return isinstance(value, bool)
    if key.kind == "list":
        return isinstance(value, list) and all(_passable(v) for v in value)
    if key.kind == "map":
        return isinstance(value, dict) and all(
            re.fullmatch(r"[A-Za-z_]\w*", k, re.ASCII) and _passable(v) for k, v in value.items())
    if key.kind in ("nnodes", "nproc") and isinstance(value, str):
        return value in NPROC_WORDS if key.kind == "nproc" else bool(
            re.fullmatch(r"\d+:\d+", value))
    if key.kind in ("int", "number", "nnodes", "nproc"):
        return (isinstance(value, int) or key.kind == "number" and isinstance(value, float)
                ) and not isinstance(value, bool) and _in_range(key, value)
    return _passable(value) and (not key.choices or value in key.choices) and (
        not key.pattern or bool(re.fullmatch(key.pattern, value)))


def _passable(value: Any) -> bool:
    """Text that can go into an argument list, an environment or a file name."""
    return isinstance(value, str) and "\0" not in value and not re.search(
        "[\ud800-\udfff]", value)


def _in_range(key: Key, value: float) -> bool:
    low = 1 if key.kind in ("nnodes", "nproc") else key.minimum
    if isinstance(value, float) and not math.isfinite(value) or abs(value) >= 2 ** 63:
        return False
    return (low is None or value >= low) and (key.maximum is None or value <= key.maximum)


def accepts(key: Key, value: Any) -> bool | None:
    """An oracle written apart from the loader: whether `key: value` (as safe_dump writes
    it) is acceptable on its own. None: not judged here."""
    if value is None:
        return key.default is None
    if key.kind == "bool":
        return isinstance(value, bool)
    if key.kind == "int":
        return type(value) is int and _in_range(key, value)
    if key.kind == "number":
        return type(value) in (int, float) and _in_range(key, value)
    if key.kind == "nproc":
        return type(value) is int and _in_range(key, value) or value in NPROC_WORDS
    if key.kind == "list":
        return isinstance(value, list) and all(
            v is not None and not isinstance(v, (list, dict)) and _passable(str(v))
            for v in value)
    if key.kind == "str" and key.choices:
        return value in key.choices
    return None


# Keys the checks across keys may fault on their own (node_rank 1 of a 1-node job).
CROSS_CHECKED = {"node_rank", "rdzv.backend"}


def nest(path: str, value: Any) -> dict[str, Any]:
    section, _, sub = path.rpartition(".")
    return {section: {sub: value}} if section else {path: value}


def problems_at(config: Config, path: str) -> list[str]:
    return [p.message for p in config.problems if p.severity == "error" and (
        p.key == path or p.key.startswith(f"{path}."))]


@FUZZ
@given(doc=st.dictionaries(KEY_NAMES, VALUES, max_size=8),
       flow=st.booleans(), top=VALUES)
def test_any_yaml_structure_loads_or_is_refused(doc: dict[str, Any], flow: bool,
                                                top: Any) -> None:
    for value in (doc, top):
        checked(parse(yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True)))


@FUZZ
@given(path=st.sampled_from(sorted(PATHS)), value=VALUES, flow=st.booleans())
def test_a_known_key_with_any_value(path: str, value: Any, flow: bool) -> None:
    text = yaml.safe_dump(nest(path, value), default_flow_style=flow, allow_unicode=True)
    config = checked(parse(text))
    assert not [p for p in config.problems if p.key == ""], (text, config.problems)
    expected = accepts(PATHS[path], value)
    if expected is not None and path not in CROSS_CHECKED:
        errors = problems_at(config, path)
        assert (not errors) == expected, (text, errors)


@FUZZ
@given(path=st.sampled_from(sorted(PATHS)), raw=st.sampled_from(TRICKY_WORDS) | TEXT,
       tag=st.sampled_from(["", "!!str ", "!!int ", "!!float ", "!!bool ", "!!null "]))
def test_a_known_key_with_any_plain_text(path: str, raw: str, tag: str) -> None:
    """Unquoted text, as people write it: YAML's own reading of `yes`, `0x1F`, `.nan`..."""
    section, _, sub = path.rpartition(".")
    line = f"{sub or path}: {tag}{raw}"
    checked(parse(f"{section}:\n  {line}\n" if section else f"{line}\n"))


@FUZZ
@given(text=RAW_YAML)
def test_random_yaml_syntax_is_reported_not_raised(text: str) -> None:
    checked(parse(text))


@settings(FUZZ, max_examples=200)
@given(data=st.binary(max_size=3000) | RAW_YAML.map(lambda t: t.encode("utf-8", "replace")))
def test_random_bytes_from_a_file(tmp_path_factory: pytest.TempPathFactory,
                                  data: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "distrun.yaml"
    path.write_bytes(data)
    checked(load(str(path)))


@settings(FUZZ, max_examples=60)
@given(digits=st.integers(1, 6000), path=st.sampled_from(sorted(
    p for p, k in PATHS.items() if k.kind in ("int", "number", "nnodes", "nproc"))),
    form=st.sampled_from(["{}", "-{}", "{}.5", "1:{}", "0x{}", "{}e3"]))
def test_huge_numbers_are_refused_with_a_short_message(digits: int, path: str,
                                                       form: str) -> None:
    number = form.format("9" * digits)
    config = checked(parse(yaml.safe_dump(nest(path, 0)).replace(": 0", f": {number}", 1)))
    if digits > 19:  # not a number Python reads (over 4,300 digits), or over 2**63
        assert problems_at(config, path), number


@settings(FUZZ, max_examples=10)
@given(size=st.integers(10_000, 1_100_000), path=st.sampled_from(
    ["script", "master_addr", "env.NAME", "script_args", "unknown", "rdzv.endpoint"]))
def test_huge_strings(size: int, path: str) -> None:
    value: Any = "x" * size
    if path == "script_args":
        value = [value]
    doc = {"env": {"NAME": value}} if path == "env.NAME" else nest(path, value)
    checked(parse(yaml.safe_dump(doc, width=2 ** 30)))


CRAFTED = {
    "python object": "script: !!python/object/apply:os.system ['touch {marker}']\n",
    "python object new": "env: !!python/object/new:os.system ['touch {marker}']\n",
    "python name": "script: !!python/name:os.system\n",
    "python module": "script: !!python/module:os\n",
    "python tag on a key": "env:\n  ? !!python/object/apply:os.system ['touch {marker}']\n  : x\n",
    "custom tag": "launcher: !torchrun torchrun\n",
    "binary": "script: !!binary dHJhaW4ucHk=\n",
    "set": "script_args: !!set {a, b}\n",
    "omap": "env: !!omap [A: '1']\n",
    "deep list": "script_args: " + "[" * 10_000 + "]" * 10_000 + "\n",
    "deep top": "[" * 10_000 + "]" * 10_000 + "\n",
    "deep mapping": "env: " + "{a: " * 10_000 + "x" + "}" * 10_000 + "\n",
    "deep key": "? " + "[" * 10_000 + "]" * 10_000 + "\n: 1\n",
    "deep block": "".join(f"{' ' * i}- \n" for i in range(0, 1400, 1)) + "\n",
    "unclosed": "[" * 10_000 + "\n",
    "recursive alias": "script_args: &a [*a]\n",
    "recursive merge": "rdzv: &r\n  <<: *r\n  id: x\n",
    "merge of a list": "rdzv:\n  <<: [1, 2]\n",
    "merge of a scalar": "env:\n  <<: x\n",
    "duplicate keys": "nnodes: 1\nnnodes: 2\nenv:\n  A: '1'\n  A: '2'\nrdzv: {}\nrdzv: {}\n",
    "duplicate anchor": "env: &a {}\nrdzv: &a {}\n",
    "undefined alias": "env: *nowhere\n",
    "two documents": "script: a.py\n---\nscript: b.py\n",
    "empty document": "---\n...\n",
    "only a comment": "# nothing\n",
    "top scalar": "3\n",
    "top text": "'torchrun'\n",
    "top list": "- launcher: torchrun\n",
    "top null": "null\n",
    "NUL in text": 'script: "a\\0.py"\n',
    "lone surrogate": 'script: "\\ud800.py"\nenv:\n  A: "\\udfff"\n  "\\ud800": x\n',
    "surrogate key": '"\\ud800": 1\n',
    "booleans as strings": "module: 'true'\nmaster_addr: yes\nscript_args: [yes, 'no']\n",
    "nan and inf": "timeout: .nan\nmaster_port: .inf\nmax_restarts: -.inf\n",
    "float overflow": "timeout: 1.0e+400\n",
    "huge nnodes range": "nnodes: '1:" + "9" * 5000 + "'\nrdzv:\n  endpoint: h:1\n",
    "unknown key storm": "".join(f"k{i}: {i}\n" for i in range(5000)),
    "control character": "script: a\x07b\n",
    "non-UTF-8 bytes": b"script: \xff\xfe train.py\n",
    "UTF-16 file": "script: train.py\n".encode("utf-16"),
    "over 1 MiB": "# " + "x" * MAX_BYTES + "\n",
}
# Each level repeats the one before nine times: 9**9 "lol"s if anything expanded it.
BILLION_LAUGHS = "env:\n" + textwrap.indent("\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
        f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]), "  ") + (
    "\nscript_args: *a9\n")
# The same with merge keys: each mapping merges the one before nine times.
MERGE_BOMB = "\n".join(
    ["m0: &m0 {" + ", ".join(f"K{j}: v" for j in range(9)) + "}"] + [
        f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}], L{i}: v}}"
        for i in range(1, 12)]) + "\nenv:\n  <<: *m11\n"
CRAFTED["billion laughs"] = BILLION_LAUGHS
CRAFTED["merge-key bomb"] = MERGE_BOMB


def _write(folder: Path, name: str, content: str | bytes, marker: Path) -> Path:
    """The file `name` in `folder`; "{marker}" in the text becomes the marker's path."""
    path = folder / (re.sub(r"\W+", "-", name) + ".yaml")
    if isinstance(content, str):
        content = content.replace("{marker}", str(marker)).encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_file_is_refused_or_loaded_safely(tmp_path: Path, case: str) -> None:
    marker = tmp_path / "constructed"
    config = checked(load(str(_write(tmp_path, case, CRAFTED[case], marker))))
    assert not marker.exists()  # nothing was constructed from a tag
    if case not in ("empty document", "only a comment", "top null", "control character"):
        assert not config.valid, config.problems
    if "tag" in case or case.startswith(("python", "binary", "set", "omap")):
        assert any("is not allowed" in p.message for p in config.problems), config.problems
    if case.startswith("deep"):
        assert any("nested more than" in p.message for p in config.problems), config.problems


def test_merge_keys_are_applied_and_written_keys_win() -> None:
    config = checked(parse(
        "rdzv: &r\n  backend: c10d\n  endpoint: head:29400\n  id: one\n"
        "env: &e\n  A: '1'\n  B: '2'\n"
        "kubernetes:\n  <<: [{name: first, image: i:1}, {name: second, cpu: '4'}]\n"
        "  cpu: '8'\n"))
    assert config.valid, config.problems
    assert config.values["kubernetes"] == {"name": "first", "image": "i:1", "cpu": "8"}
    merged = checked(parse("env:\n  <<: {A: '1', B: '2'}\n  B: '3'\n"))
    assert merged.values["env"] == {"A": "1", "B": "3"}


SCRIPT_LIMITS = """\
import json, resource, sys, time
from distrun.config.load import load
load(sys.argv[1])  # warm up: imports, caches
out = {"before_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
for path in sys.argv[1:]:
    started = time.process_time()  # CPU time: the work, whatever else the machine runs
    config = load(path)
    out[path] = [time.process_time() - started, len(config.problems)]
out["after_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


def test_bombs_stay_small_and_fast(tmp_path: Path) -> None:
    """In a fresh process: each crafted file is refused within seconds of CPU time, and
    loading all of them raises the process's peak resident memory by less than 48 MiB."""
    files = {
        "billion laughs": BILLION_LAUGHS, "merge-key bomb": MERGE_BOMB,
        "deep list": CRAFTED["deep list"], "deep mapping": CRAFTED["deep mapping"],
        "1 MiB of values": "script_args: [" + "1," * (MAX_BYTES // 2 - 20) + "1]\n",
        "1 MiB of keys": "".join(f"k{i}: 1\n" for i in range(MAX_BYTES // 10)),
        "1 MiB of aliases": "a: &a x\nscript_args: [" + "*a," * (MAX_BYTES // 3 - 20) + "*a]\n",
        "1 MiB of one value": "script: " + "x" * (MAX_BYTES - 20) + "\n",
    }
    paths = [str(_write(tmp_path, name, text, tmp_path / "m")) for name, text in files.items()]
    for path in paths:
        assert Path(path).stat().st_size <= MAX_BYTES
    run = subprocess.run([sys.executable, "-c", SCRIPT_LIMITS, *paths], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    for name, path in zip(files, paths, strict=True):
        seconds, problems = out[path]
        assert problems >= 1, name
        assert seconds < 5, f"{name}: {seconds:.1f} s of CPU"
    grown = (out["after_kib"] - out["before_kib"]) / 1024
    assert grown < 48, f"peak memory grew by {grown:.0f} MiB"


CLI_RUN = """\
import json, sys
from distrun.cli import main
codes = []
for path in sys.argv[1:]:
    for argv in (["config", "validate", path], ["config", "show", path],
                 ["launch", "--config", path, "--dry-run"]):
        try:
            main(argv)
        except SystemExit as exit:
            codes.append([argv[1], exit.code])
print("@@", json.dumps(codes))
"""
# `config validate`: 0 valid, 1 problems; `config show` and `launch --config`: 0, or 2 (bad
# input: the file, or no script to launch).
EXPECTED_CODES = {"validate": {0, 1}, "show": {0, 2}, "--config": {0, 2}}


def run_cli(folder: Path, contents: list[str | bytes]) -> None:
    """Every command on every file, in one process whose stdout is strict UTF-8: the exit
    codes are the documented ones, and no traceback or internal error is printed."""
    paths = [str(_write(folder, f"f{i}", c, folder / "m")) for i, c in enumerate(contents)]
    run = subprocess.run([sys.executable, "-c", CLI_RUN, *paths], capture_output=True,
                         timeout=120, cwd=folder, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    output = (run.stdout + run.stderr).decode("utf-8", "replace")
    assert run.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "internal error" not in output, output[-3000:]
    codes = json.loads(output[output.rindex("@@ ") + 3:].splitlines()[0])
    assert len(codes) == 3 * len(paths)
    for (command, code), path in zip(codes, [p for p in paths for _ in range(3)], strict=True):
        assert code in EXPECTED_CODES[command], (command, code, Path(path).read_bytes()[:300])


def test_cli_on_crafted_files(tmp_path: Path) -> None:
    run_cli(tmp_path, list(CRAFTED.values()))


@settings(FUZZ, max_examples=3)
@given(texts=st.lists(st.one_of(
    RAW_YAML, st.builds(lambda d: yaml.safe_dump(d, allow_unicode=True),
                        st.dictionaries(KEY_NAMES, VALUES, max_size=6))),
    min_size=20, max_size=20))
def test_cli_on_fuzzed_files(tmp_path_factory: pytest.TempPathFactory,
                             texts: list[str]) -> None:
    run_cli(tmp_path_factory.mktemp("cli"), list(texts))
