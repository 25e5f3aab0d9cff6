"""While a multi-node job waits at its rendezvous: how many nodes have joined.

torchrun's c10d rendezvous keeps its state in the store at the endpoint (key
`torch.rendezvous.<run id>`: the base64 of a pickled state whose `participants` are the
nodes of the round being formed and `wait_list` those waiting for the next one). A short
probe process (it imports torch, which distrun itself does not) connects to that store as
a client, reads the state and prints the counts; it writes nothing there. The static
rendezvous keeps no such state (node 0's store only counts connections internally), so
there a node only learns whether node 0 answers at all (a plain TCP connection).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from distrun.launch.spec import LaunchSpec

PROBE_SECONDS = 3  # the probe's connection timeout
PROBE_LIMIT = 20.0  # a probe still running after this long is stopped and not heard

_PROBE = """
import base64, pickle, sys
from datetime import timedelta
from torch.distributed import TCPStore
host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    store = TCPStore(host, port, is_master=False, wait_for_workers=False,
                     timeout=timedelta(seconds=float(sys.argv[4])))
except Exception:
    print("no-answer")
    sys.exit()
if not store.check([key]):
    print("0 0")
    sys.exit()
state = pickle.loads(base64.b64decode(store.get(key)))
print(len(state.participants), len(state.wait_list))
"""


@dataclass
class Heard:
    """What the rendezvous said: nodes joined (None: not known), or that it did not
    answer."""

    joined: int | None = None
    answered: bool = True


class Meeting:
    """Asks the rendezvous of `spec` how many nodes have joined, in the background:
    `ask()` starts a probe, `heard()` is its answer once it has one (None before)."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.probe: subprocess.Popen[str] | None = None
        self.since = 0.0
        host, _, port = (spec.rdzv_endpoint or "").rpartition(":")
        self.counted = (spec.launcher == "torchrun" and spec.rdzv_backend == "c10d"
                        and bool(host) and port.isdigit())
        self.host, self.port = (host, int(port)) if self.counted else (
            spec.master_addr, spec.master_port)

    def ask(self) -> None:
        if not self.counted:
            return
        self.stop()
        key = f"torch.rendezvous.{self.spec.rdzv_id}"
        try:
            self.probe = subprocess.Popen(
                [sys.executable, "-c", _PROBE, self.host, str(self.port), key, str(PROBE_SECONDS)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                text=True)
        except OSError:
            self.probe = None
        self.since = time.monotonic()

    def heard(self) -> Heard | None:
        """The answer: a count (c10d), whether node 0 answers (static, other nodes), or
        nothing to add (static node 0); None while the probe still runs."""
        if not self.counted:
            if self.spec.node_rank == 0 or not self.host:
                return Heard()
            return Heard(answered=_answers(self.host, self.port))
        if self.probe is None:
            return Heard()
        if self.probe.poll() is None:
            if time.monotonic() - self.since < PROBE_LIMIT:
                return None
            self.stop()
            return Heard()
        out = (self.probe.communicate()[0] or "").split()
        self.probe = None
        if out == ["no-answer"]:
            return Heard(answered=False)
        if len(out) == 2 and all(word.isdigit() for word in out):
            return Heard(joined=int(out[0]) + int(out[1]))
        return Heard()

    def stop(self) -> None:
        if self.probe is not None and self.probe.poll() is None:
            self.probe.kill()
            self.probe.wait()
        self.probe = None


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def waiting_line(spec: LaunchSpec, meet: str, waited: float, heard: Heard) -> str:
    """`distrun: waiting for the other nodes at HOST:PORT (15 s; 1 of 2 nodes joined):
    no worker starts until they join`."""
    nodes = f"{spec.min_nodes}-{spec.max_nodes}" if spec.elastic else str(spec.max_nodes)
    if not heard.answered:
        where = "node 0" if spec.rdzv_backend == "static" else "the rendezvous store"
        state = f"{nodes} nodes in all; {where} does not answer there yet"
    elif heard.joined is not None:
        state = f"{heard.joined} of {nodes} nodes joined"
    else:
        state = f"{nodes} nodes in all"
    return (f"distrun: waiting for the other nodes at {meet} ({waited:.0f} s; {state}): "
            "no worker starts until they join")
