"""`config validate` and `distrun launch` judge a setting by the same rules: the same values,
written in distrun.yaml and given as flags, are refused by both or accepted by both.

Each case is one setting (or a few that go together) written both ways. The config side
parses the YAML text; the launch side runs the real `distrun launch ... --dry-run`
command line (in-process, through distrun.cli.main) with no cluster variables set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrun.cli import main
from distrun.config.load import parse
from tests.conftest import distrun

# (case, YAML lines, launch flags, both accept?)
CASES: list[tuple[str, str, list[str], bool]] = [
    ("rdzv conf Join_Timeout", "rdzv: {endpoint: 127.0.0.1:29400, conf: {Join_Timeout: 9}}",
     ["--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf", "Join_Timeout=9"], False),
    ("rdzv conf with a space", "rdzv: {endpoint: 127.0.0.1:29400, conf: {join timeout: 9}}",
     ["--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf", "join timeout=9"], False),
    ("rdzv conf value with a comma", "rdzv: {endpoint: 127.0.0.1:29400, conf: {a: '1,b=2'}}",
     ["--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf", "a=1,b=2"], False),
    ("rdzv conf value with a space", "rdzv: {endpoint: 127.0.0.1:29400, conf: {a: 'x y'}}",
     ["--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf", "a=x y"], False),
    ("rdzv conf without c10d", "rdzv: {conf: {join_timeout: 9}}",
     ["--rdzv-conf", "join_timeout=9"], False),
    ("rdzv conf known settings", "rdzv: {endpoint: 127.0.0.1:29400, conf: {join_timeout: 9, "
     "last_call_timeout: 1}}", ["--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf",
                                "join_timeout=9", "--rdzv-conf", "last_call_timeout=1"], True),
    ("backend etcd3", "rdzv: {backend: etcd3, endpoint: 127.0.0.1:2379}",
     ["--rdzv-backend", "etcd3", "--rdzv-endpoint", "127.0.0.1:2379"], False),
    ("backend etcd", "rdzv: {backend: etcd, endpoint: 127.0.0.1:2379}",
     ["--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1:2379"], False),
    ("backend c10d without endpoint", "rdzv: {backend: c10d}", ["--rdzv-backend", "c10d"],
     False),
    ("backend static with an endpoint", "rdzv: {backend: static, endpoint: 127.0.0.1:29400}",
     ["--rdzv-backend", "static", "--rdzv-endpoint", "127.0.0.1:29400"], False),
    ("backend c10d with endpoint", "rdzv: {backend: c10d, endpoint: 127.0.0.1:29400}",
     ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400"], True),
    ("nnodes 0", "nnodes: 0", ["--nnodes", "0"], False),
    ("nnodes 3:2", "nnodes: '3:2'", ["--nnodes", "3:2"], False),
    ("nnodes 0:2", "nnodes: '0:2'", ["--nnodes", "0:2"], False),
    ("nnodes over the maximum", "nnodes: 70000\nmaster_addr: 127.0.0.1",
     ["--nnodes", "70000", "--master-addr", "127.0.0.1"], False),
    ("nnodes words", "nnodes: two", ["--nnodes", "two"], False),
    ("node_rank out of range", "nnodes: 2\nnode_rank: 2\nmaster_addr: 127.0.0.1",
     ["--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1"], False),
    ("node_rank negative", "nnodes: 2\nnode_rank: -1\nmaster_addr: 127.0.0.1",
     ["--nnodes", "2", "--node-rank", "-1", "--master-addr", "127.0.0.1"], False),
    ("node_rank negative with c10d", "nnodes: 2\nnode_rank: -1\nrdzv: {endpoint: "
     "127.0.0.1:29400}", ["--nnodes", "2", "--node-rank", "-1", "--rdzv-endpoint",
                          "127.0.0.1:29400"], False),
    ("node_rank 1 of 2", "nnodes: 2\nnode_rank: 1\nmaster_addr: 127.0.0.1",
     ["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1"], True),
    ("elastic with static", "nnodes: '1:4'\nmaster_addr: 127.0.0.1",
     ["--nnodes", "1:4", "--master-addr", "127.0.0.1"], False),
    ("elastic with c10d", "nnodes: '1:4'\nrdzv: {endpoint: 127.0.0.1:29400}",
     ["--nnodes", "1:4", "--rdzv-endpoint", "127.0.0.1:29400"], True),
    ("accelerate elastic", "launcher: accelerate\nnnodes: '1:2'\nrdzv: {endpoint: "
     "127.0.0.1:29400}", ["--launcher", "accelerate", "--nnodes", "1:2", "--rdzv-endpoint",
                          "127.0.0.1:29400"], False),
    ("endpoint without a port", "nnodes: 2\nrdzv: {endpoint: 127.0.0.1}",
     ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1"], True),
    ("endpoint port not a number", "rdzv: {endpoint: 'host:notaport'}",
     ["--rdzv-endpoint", "host:notaport"], False),
    ("endpoint port 0", "rdzv: {endpoint: 'host:0'}", ["--rdzv-endpoint", "host:0"], False),
    ("endpoint port 70000", "rdzv: {endpoint: 'host:70000'}",
     ["--rdzv-endpoint", "host:70000"], False),
    ("endpoint without a host", "rdzv: {endpoint: ':29400'}", ["--rdzv-endpoint", ":29400"],
     False),
    ("endpoint host with an empty label", "rdzv: {endpoint: 'node..lan:29400'}",
     ["--rdzv-endpoint", "node..lan:29400"], False),
    ("master_addr with an empty label", "nnodes: 2\nmaster_addr: node..lan",
     ["--nnodes", "2", "--master-addr", "node..lan"], False),
    ("env name starting with a digit", "env: {1X: y}", ["--env", "1X=y"], False),
    ("env name with a dash", "env: {A-B: y}", ["--env", "A-B=y"], False),
    ("env name not ASCII", "env: {É: y}", ["--env", "É=y"], False),
    ("env name fine", "env: {MY_VAR_2: y}", ["--env", "MY_VAR_2=y"], True),
    ("master port 0", "master_port: 0", ["--master-port", "0"], False),
    ("master port 70000", "master_port: 70000", ["--master-port", "70000"], False),
    ("nproc 0", "nproc_per_node: 0", ["--nproc-per-node", "0"], False),
    ("nproc over the maximum", "nproc_per_node: 5000", ["--nproc-per-node", "5000"], False),
    ("nproc word", "nproc_per_node: many", ["--nproc-per-node", "many"], False),
    ("nproc cpu", "nproc_per_node: cpu", ["--nproc-per-node", "cpu"], True),
    ("max_restarts negative", "max_restarts: -1", ["--max-restarts", "-1"], False),
    ("timeout 0", "timeout: 0", ["--timeout", "0"], False),
    ("launcher unknown", "launcher: mpirun", ["--launcher", "mpirun"], False),
    ("mixed precision unknown", "mixed_precision: fp8", ["--mixed-precision", "fp8"], False),
    ("a plain single-node job", "nproc_per_node: 2", ["--nproc-per-node", "2"], True),
]


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def config_accepts(yaml_lines: str, script: str) -> tuple[bool, str]:
    config = parse(f"script: {script}\n{yaml_lines}\n", "distrun.yaml")
    errors = [f"{p.key}: {p.message}" for p in config.problems if p.severity == "error"]
    return config.valid, "; ".join(errors)


def launch_accepts(flags: list[str], script: str, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> tuple[bool, str]:
    for name in [n for n in os.environ if n.startswith(("SLURM_", "PET_"))] + [
            "KUBERNETES_SERVICE_HOST"]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as ended:
        main(["launch", *flags, "--dry-run", script])
    err = capsys.readouterr().err
    assert ended.value.code in (0, 2), err  # accepted, or bad input: never a crash
    return ended.value.code == 0, err


@pytest.mark.parametrize(("case", "yaml_lines", "flags", "accepted"), CASES,
                         ids=[c[0] for c in CASES])
def test_config_and_launch_give_the_same_verdict(
        case: str, yaml_lines: str, flags: list[str], accepted: bool, script: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    by_config, why_config = config_accepts(yaml_lines, script)
    by_launch, why_launch = launch_accepts(flags, script, capsys, monkeypatch)
    assert (by_config, by_launch) == (accepted, accepted), (why_config, why_launch)


def test_a_refused_rdzv_setting_is_named_with_the_setting_meant() -> None:
    config = parse("rdzv:\n  endpoint: h:1\n  conf:\n    Join_Timeout: 9\n", "distrun.yaml")
    (problem,) = config.problems
    assert (problem.line, problem.key) == (4, "rdzv.conf.Join_Timeout")
    assert "did you mean 'join_timeout'?" in problem.message


def test_launch_names_the_flag_and_the_setting_meant(script: str) -> None:
    result = distrun("launch", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf",
                     "Join_Timeout=9", "--dry-run", script)
    assert result.returncode == 2
    assert result.stderr.startswith("distrun: error: --rdzv-conf: 'Join_Timeout' is not a "
                                    "rendezvous setting name"), result.stderr
    assert "did you mean 'join_timeout'?" in result.stderr


def test_launch_with_a_config_file_refuses_what_validate_refuses(tmp_path: Path,
                                                                 script: str) -> None:
    """The issue's case: a file `config validate` passed and `launch --config` refused."""
    path = tmp_path / "distrun.yaml"
    path.write_text(f"script: {script}\nnnodes: '1:2'\nrdzv:\n  endpoint: 127.0.0.1:29400\n"
                    "  conf:\n    Join_Timeout: 9\n")
    validated = distrun("config", "validate", str(path))
    launched = distrun("launch", "--config", str(path), "--dry-run")
    assert (validated.returncode, launched.returncode) == (1, 2)
    assert f"{path}:6: error:" in validated.stdout
    assert "did you mean 'join_timeout'?" in validated.stdout
    assert "did you mean 'join_timeout'?" in launched.stderr
