"""doctor as a user watches it: each check printed as it finishes, and a plan of more
processes than this machine has CPUs (or GPUs) said, not passed as ok."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distrun.doctor import CheckResult, Context, platform, run_checks
from tests.conftest import distrun


def test_more_cpu_ranks_than_cpus_warn() -> None:
    result = platform.nproc_result(64, 0, cpus=2)
    assert result.status == "warn"
    assert "64 CPU process(es) on 2 CPU(s): oversubscribed" in result.detail
    assert "--nproc-per-node 2" in result.hint
    threads = platform.nproc_result(4, 0, cpus=2, omp="2")
    assert threads.status == "warn" and "x 2 threads each" in threads.detail
    assert "--nproc-per-node 1" in threads.hint
    assert platform.nproc_result(2, 0, cpus=2).status == "ok"
    assert platform.nproc_result(3, 2, cpus=64).status == "fail"  # GPU ranks over GPUs


def test_doctor_warns_about_oversubscription_on_this_machine() -> None:
    cpus = platform.cpu_count()
    result = distrun("doctor", "--json", "--no-smoke", "--nproc-per-node", str(cpus * 32))
    records = {r["name"]: r for r in json.loads(result.stdout)}
    if "no CUDA" not in records.get("cuda", {}).get("detail", "no CUDA"):
        pytest.skip("a machine with GPUs: the GPU count decides")
    assert records["nproc_per_node"]["status"] == "warn"
    assert "oversubscribed" in records["nproc_per_node"]["detail"]


def test_results_are_handed_over_as_each_check_finishes() -> None:
    seen: list[str] = []

    def first(ctx: Context) -> list[CheckResult]:
        return [CheckResult("one", "ok", "")]

    def second(ctx: Context) -> list[CheckResult]:
        assert seen == ["one"]  # the first was out before the second started
        return [CheckResult("two", "warn", "")]

    results = run_checks(Context(), [first, second], done=lambda r: seen.append(r.name))
    assert seen == ["one", "two"] == [r.name for r in results]


@pytest.mark.e2e
def test_doctor_prints_each_check_before_the_smoke_test_ends() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "distrun", "doctor"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    first = proc.stdout.readline()
    running = proc.poll() is None  # the smoke test (seconds) still to come
    rest, _ = proc.communicate(timeout=300)
    assert first.startswith("ok    python "), first
    assert running
    assert rest.rstrip().splitlines()[-1].endswith("skipped")
    assert "smoke test (gloo)" in rest
