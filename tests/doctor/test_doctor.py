"""distrun doctor: each check's ok / warn / fail paths under real conditions where possible
(a socket really bound, a fake apex on the path, variables really set, a small tmpfs)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from distrun.doctor import CheckResult, Context, network, platform, run_checks, software, system
from tests.conftest import distrun


def results(check: object, ctx: Context) -> dict[str, CheckResult]:
    return {r.name: r for r in check(ctx)}  # type: ignore[operator]


def env_ctx(**env: str) -> Context:
    return Context(environ={k: v for k, v in os.environ.items()
                            if k not in ("RANK", "WORLD_SIZE", "OMP_NUM_THREADS")} | env)


@pytest.mark.e2e
def test_doctor_json_on_this_machine_passes_with_a_real_gloo_smoke_test() -> None:
    result = distrun("doctor", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads(result.stdout)
    assert all(set(r) == {"name", "status", "detail", "hint"} for r in records)
    smoke = next(r for r in records if r["name"] == "smoke test (gloo)")
    assert smoke["status"] == "ok" and "all_reduce, broadcast, barrier" in smoke["detail"]
    assert not [r for r in records if r["status"] == "fail"]


@pytest.mark.e2e
def test_text_output_and_bandwidth_table() -> None:
    result = distrun("doctor", "--bandwidth")
    assert result.returncode == 0, result.stdout
    assert "bandwidth (gloo)" in result.stdout and "busbw" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].endswith("skipped")


def test_bad_option_is_exit_2() -> None:
    result = distrun("doctor", "--master-port", "0")
    assert result.returncode == 2
    result = distrun("doctor", "--no-smoke", "--nproc-per-node", "0")  # launch refuses it too
    assert result.returncode == 2
    assert "--nproc-per-node 0: must be at least 1" in result.stderr


def test_master_port_in_use_fails_and_free_port_is_ok() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = results(network.check_master, Context(master_port=port))
    assert taken["master port"].status == "fail" and "already in use" in taken["master port"].detail
    free = results(network.check_master, Context(master_port=port))
    assert free["master port"].status == "ok"


def test_the_default_port_taken_is_a_warning_not_a_failure() -> None:
    """Without --master-port, 29500 only matters across nodes (one node gets a free port):
    another job holding it on a shared machine must not fail doctor. Held here for the
    check (or already held by someone else: taken either way)."""
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", network.DEFAULT_PORT))
            busy.listen()
        except OSError:
            pass  # another process holds it: the check sees it taken all the same
        found = results(network.check_master, Context())
    assert found["master port"].status == "warn", found["master port"]
    assert "a multi-node job needs another --master-port" in found["master port"].detail


def test_unresolvable_master_fails() -> None:
    found = results(network.check_master, Context(master_addr="no-such-host.invalid"))
    assert found["master address"].status == "fail"


def test_socket_ifname_must_name_a_real_interface() -> None:
    bad = results(network.check_interfaces, env_ctx(GLOO_SOCKET_IFNAME="nosuch0"))
    assert bad["GLOO_SOCKET_IFNAME"].status == "fail"
    good = results(network.check_interfaces, env_ctx(NCCL_SOCKET_IFNAME="lo"))
    assert good["NCCL_SOCKET_IFNAME"].status == "ok"


def test_hostname_on_loopback_warns_for_multi_node_only() -> None:
    on_loopback = socket.gethostbyname(socket.gethostname()).startswith("127.")
    multi = env_ctx()
    multi.nnodes = 2
    found = results(network.check_hostname, multi)["hostname"]
    assert found.status == ("warn" if on_loopback else "ok")
    if on_loopback:
        assert "GLOO_SOCKET_IFNAME=" in found.hint
        fixed = env_ctx(GLOO_SOCKET_IFNAME="lo")
        fixed.nnodes = 2
        assert results(network.check_hostname, fixed)["hostname"].status == "ok"
    assert results(network.check_hostname, env_ctx())["hostname"].status == "ok"


def test_leftover_launcher_variables_warn_unless_a_scheduler_set_them() -> None:
    leftover = results(system.check_environment, env_ctx(RANK="3", WORLD_SIZE="8"))
    assert leftover["launcher variables"].status == "warn"
    assert "rank 3 of 8" in leftover["launcher variables"].hint
    slurm = results(system.check_environment, env_ctx(RANK="3", SLURM_JOB_ID="1"))
    assert slurm["launcher variables"].status == "ok"
    clean = results(system.check_environment, env_ctx())
    assert clean["launcher variables"].status == "ok"


def test_nccl_switches_warn() -> None:
    found = results(system.check_environment, env_ctx(NCCL_P2P_DISABLE="1"))
    assert found["NCCL_P2P_DISABLE"].status == "warn"


@pytest.mark.parametrize(("omp", "nproc", "status"), [
    (None, "2", "ok"), ("1", "2", "ok"), ("4", "2", "warn"), ("lots", "1", "warn"),
])
def test_omp_threads_against_cpus(omp: str | None, nproc: str, status: str) -> None:
    ctx = env_ctx(**({"OMP_NUM_THREADS": omp} if omp else {}))
    ctx.nproc_per_node = nproc
    cpus = len(os.sched_getaffinity(0))
    expected = status if not (omp == "4" and 4 * 2 <= cpus) else "ok"
    assert results(system.check_threads, ctx)["cpu threads"].status == expected


def test_low_open_file_limit_warns() -> None:
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024));"
            "from distrun.doctor import Context; from distrun.doctor.system import "
            "check_open_files; r = list(check_open_files(Context()))[0];"
            "print(r.status, r.detail)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.startswith("warn soft 1024"), run.stderr
    assert results(system.check_open_files, Context())["open files"].status == (
        "ok" if resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 4096 else "warn")


def test_small_dev_shm_warns(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a small /dev/shm in a private namespace")
    code = ("from distrun.doctor import Context; from distrun.doctor.system import check_shm;"
            "r = list(check_shm(Context()))[0]; print(r.status, r.detail)")
    run = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64m tmpfs "
                          f"/dev/shm && {sys.executable} -c '{code}'"], capture_output=True,
                         text=True)
    if run.returncode != 0 and "mount" in run.stderr:
        pytest.skip(f"cannot mount here: {run.stderr.strip()}")
    assert run.stdout.startswith("warn 0.1 GiB"), run.stdout + run.stderr
    assert results(system.check_shm, Context())["/dev/shm"].status in ("ok", "warn")


def fake_package(root: Path, with_amp: bool) -> None:
    package = root / "apex"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("'''a web toolkit that happens to be called apex'''\n")
    if with_amp:
        (package / "amp").mkdir()
        (package / "amp" / "__init__.py").write_text("def initialize(*a, **k): pass\n")


@pytest.mark.parametrize(("with_amp", "words"), [
    (False, "unrelated 'apex' web toolkit"), (True, "apex.amp is deprecated"),
])
def test_apex_trap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_amp: bool,
                   words: str) -> None:
    fake_package(tmp_path, with_amp)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "apex" or m.startswith("apex.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        found = results(software.check_apex, Context())["apex"]
    finally:  # checking apex.amp imported the fake package: forget it
        for name in [m for m in sys.modules if m == "apex" or m.startswith("apex.")]:
            del sys.modules[name]
    assert found.status == "warn" and words in found.hint
    assert str(tmp_path) in found.detail


def test_no_apex_is_ok() -> None:
    assert results(software.check_apex, Context())["apex"].status == "ok"


def test_apex_trap_through_pythonpath(tmp_path: Path) -> None:
    fake_package(tmp_path, with_amp=False)
    result = distrun("doctor", "--json", "--no-smoke", env={"PYTHONPATH": str(tmp_path)})
    apex = next(r for r in json.loads(result.stdout) if r["name"] == "apex")
    assert apex["status"] == "warn"
    assert result.returncode == 0  # a warning does not fail the doctor


def test_accelerate_default_config_valid_and_broken(tmp_path: Path) -> None:
    config = tmp_path / "accelerate" / "default_config.yaml"
    config.parent.mkdir()
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: NO\n"
                      "num_processes: 1\nmixed_precision: 'no'\nuse_cpu: true\n")
    good = results(software.check_accelerate, env_ctx(HF_HOME=str(tmp_path)))
    assert good["accelerate config"].status == "ok"
    config.write_text("distributed_type: [this is: not valid\n")
    bad = results(software.check_accelerate, env_ctx(HF_HOME=str(tmp_path)))
    assert bad["accelerate config"].status == "fail"


def torchrun_status(folder: Path, shebang: str) -> str:
    fake = folder / "torchrun"
    fake.write_text(f"#!{shebang}\nraise SystemExit(1)\n")
    fake.chmod(0o755)
    code = ("from distrun.doctor import Context; from distrun.doctor.software import "
            "check_torchrun; r = list(check_torchrun(Context()))[0]; print(r.status)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{folder}:{Path(sys.executable).parent}:"
                              f"{os.environ['PATH']}"})
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_torchrun_of_another_python_on_path_warns(tmp_path: Path) -> None:
    # A virtual environment beside the running one: its python is a link to the same
    # interpreter, yet its torchrun would run without this environment's packages.
    other = tmp_path / "other-env"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip",
                    str(other)], check=True)
    assert torchrun_status(tmp_path, str(other / "bin" / "python")) == "warn"
    assert torchrun_status(tmp_path, "/no/such/python") == "warn"
    assert torchrun_status(tmp_path, sys.executable) == "ok"
    assert torchrun_status(tmp_path, f"/usr/bin/env {Path(sys.executable).name}") == "ok"


@pytest.mark.parametrize(("nproc", "gpus", "status"), [(4, 2, "fail"), (2, 2, "ok"),
                                                        (4, 0, "ok")])
def test_nproc_against_gpus(nproc: int, gpus: int, status: str) -> None:
    assert platform.nproc_result(nproc, gpus).status == status


def test_cuda_visible_devices_empty_warns_and_cuda_skips_on_cpu() -> None:
    found = results(platform.check_cuda, env_ctx(CUDA_VISIBLE_DEVICES=""))
    assert found["CUDA_VISIBLE_DEVICES"].status == "warn"
    import torch

    if not torch.cuda.is_available():
        assert found["cuda"].status == "skip"


@pytest.mark.e2e
def test_a_broken_network_setting_fails_the_smoke_test() -> None:
    ctx = env_ctx()
    os.environ["GLOO_SOCKET_IFNAME"] = "nosuch0"
    try:
        from distrun.doctor import smoke

        found = {r.name: r for r in run_checks(ctx, [smoke.check_smoke])}
    finally:
        del os.environ["GLOO_SOCKET_IFNAME"]
    assert found["smoke test (gloo)"].status == "fail"
    assert "nosuch0" in found["smoke test (gloo)"].detail


def test_a_crashing_check_is_reported_not_raised() -> None:
    def check_broken(ctx: Context) -> list[CheckResult]:
        raise RuntimeError("boom")

    found = run_checks(Context(), [check_broken])
    assert found == [CheckResult("broken", "fail", "the check itself failed: RuntimeError: boom",
                                 "report this as a distrun bug")]


def test_deepspeed_its_accelerator_and_the_op_built_at_set_up() -> None:
    pytest.importorskip("deepspeed", reason="DeepSpeed is installed by `make test`")
    from distrun.doctor import deepspeed

    found = list(deepspeed.check_deepspeed(env_ctx()))
    assert [r.name for r in found] == ["deepspeed", "deepspeed ops"], found
    accelerator = "cuda" if torch_cuda() else "cpu"
    assert found[0].status == "ok" and found[0].detail.endswith(f"accelerator {accelerator}")
    # make's set-up builds the shared-memory op, so no test waits minutes for it
    assert found[1].status == "ok" and "deepspeed_shm_comm" in found[1].detail, found[1]


@pytest.mark.parametrize("place", ["TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME"])
def test_a_lock_left_by_a_killed_op_build_fails_with_the_fix(tmp_path: Path, place: str) -> None:
    """torch builds an op in $TORCH_EXTENSIONS_DIR/OP, or else in
    $XDG_CACHE_HOME/torch_extensions/pyXY_BUILD/OP."""
    from distrun.doctor import deepspeed

    root = tmp_path if place == "TORCH_EXTENSIONS_DIR" else tmp_path / "torch_extensions"
    op = root / "fused_adam" if place == "TORCH_EXTENSIONS_DIR" else (
        root / "py311_cpu" / "fused_adam")
    op.mkdir(parents=True)
    (op / "fused_adam.so").write_bytes(b"")
    lock = op / "lock"
    lock.write_text("")
    environ = {place: str(tmp_path)}
    found = list(deepspeed._ops(*deepspeed.op_folders(environ)))
    assert [(r.status, r.detail.split(":")[0]) for r in found] == [
        ("ok", f"built in {root}"), ("warn", str(lock))]
    assert found[0].detail.endswith(": fused_adam")
    old = lock.stat().st_mtime - deepspeed.STALE_AFTER - 60
    os.utime(lock, (old, old))
    found = list(deepspeed._ops(*deepspeed.op_folders(environ)))
    assert found[1].status == "fail" and "waits on it forever" in found[1].detail
    assert found[1].hint == f"remove it (no build is running): rm {lock}"


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
