"""A real two-node SLURM cluster for the tests of this folder (slurm_rig.sh builds it:
slurm-wlm and munge from the package index, two network-namespace nodes on a bridge).

Needs root, iproute2 and unshare/nsenter; installs slurm-wlm and munge with apt-get when
they are missing. Skipped, with the reason, where that cannot be done."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

RIG = Path(__file__).with_name("slurm_rig.sh")


def _rig(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(RIG), *args], capture_output=True, text=True,
                          timeout=timeout)


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
    installed = _rig("install", timeout=600)
    if installed.returncode != 0:
        pytest.skip(f"cannot install slurm-wlm and munge: {installed.stderr.strip()[-500:]}")
    state = tmp_path_factory.mktemp("slurm")
    state.chmod(0o755)
    started = _rig("up", str(state), str(os.getpid()), timeout=120)
    if started.returncode == 3:  # another test run on this machine has the rig up
        pytest.skip(started.stderr.strip()[-500:])
    try:
        if started.returncode != 0:
            pytest.fail(f"the SLURM rig did not start:\n{started.stderr[-3000:]}")
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        _rig("down", str(state), timeout=60)
