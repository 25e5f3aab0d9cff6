"""A real two-node SLURM cluster for the tests of this folder (slurm_rig.sh builds it:
slurm-wlm and munge from the package index, two network-namespace nodes on a bridge).

Needs root, iproute2 and unshare/nsenter; installs slurm-wlm and munge with apt-get when
they are missing. Skipped, with the reason, where that cannot be done.

One rig per machine (fixed names, addresses and ports), shared by the pytest-xdist workers
of one test run, whichever worker each test lands on: the workers agree through a file
lock. The first one to need the rig brings it up; each worker that uses it holds the lock
shared; the last one to finish takes it down. (pytest-xdist's `--dist loadgroup` would put
the tests in one worker, but with pytest 9.2 its group marks are lost: CI ran them in two
workers, each bringing up and taking down the same network under the other.)"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

RIG = Path(__file__).with_name("slurm_rig.sh")
LOCK = Path("/tmp/distrun-slurm-rig.lock")
SHARED = Path("/tmp/distrun-slurm-rig.run")  # "DIR RUN": the rig up and the test run using it
OWNER_FILE = Path("/tmp/distrun-slurm-rig.owner")  # slurm_rig.sh's "DIR PID"


def _rig(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(RIG), *args], capture_output=True, text=True,
                          timeout=timeout)


def _this_run() -> tuple[str, int]:
    """The test run's id and the pid that lives as long as it (all workers share both)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getppid())), os.getppid()
    return str(os.getpid()), os.getpid()


def _rig_of(run: str) -> Path | None:
    """The rig this run already has up (brought up by another of its workers), if any."""
    try:
        folder, owner = SHARED.read_text().split()
        up, _pid = OWNER_FILE.read_text().split()
    except (OSError, ValueError):
        return None
    return Path(folder) if owner == run and up == folder else None


def _bring_up(tmp_path_factory: pytest.TempPathFactory, run: str, pid: int) -> Path:
    state = tmp_path_factory.mktemp("slurm")
    state.chmod(0o755)
    started = _rig("up", str(state), str(pid), timeout=120)
    if started.returncode == 3:  # another test run on this machine has the rig up
        pytest.skip(started.stderr.strip()[-500:])
    if started.returncode != 0:
        _rig("down", str(state), timeout=60)
        pytest.fail(f"the SLURM rig did not start:\n{started.stderr[-3000:]}")
    SHARED.write_text(f"{state} {run}\n")
    return state


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment that talks to the test cluster (SLURM_CONF)."""
    if os.geteuid() != 0:
        pytest.skip("the SLURM rig needs root (network namespaces, slurmd)")
    missing = [tool for tool in ("ip", "nsenter", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the SLURM rig needs {', '.join(missing)}")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("slurm-wlm is not installed and there is no apt-get to install it")
    run, pid = _this_run()
    lock = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker installs and brings up at a time
        installed = _rig("install", timeout=600)
        if installed.returncode != 0:
            pytest.skip(f"cannot install slurm-wlm and munge: {installed.stderr.strip()[-500:]}")
        state = _rig_of(run) or _bring_up(tmp_path_factory, run, pid)
        fcntl.flock(lock, fcntl.LOCK_SH)  # in use: no other worker takes it down
    except BaseException:
        os.close(lock)
        raise
    try:
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another worker still uses the rig: the last one takes it down
        else:
            _rig("down", str(state), timeout=60)
            SHARED.unlink(missing_ok=True)
        finally:
            os.close(lock)
