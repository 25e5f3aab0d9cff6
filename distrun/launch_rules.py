"""The rules of a launch, in one place: `config validate` and `distrun launch` both judge by them.

Defaults, ports and choices; node ranges (`N`, `MIN:MAX`); process counts; rendezvous
settings; environment variable names; host names and HOST:PORT endpoints; and the rules
across settings (a node rank within the node count, an elastic job needs the c10d
rendezvous, accelerate cannot run one...). A rule returns a `Verdict` (what is wrong
and how to fix it, naming the setting as the user wrote it: a flag or a config key);
config/load.py turns it into a Problem with a line, launch/validate.py into a
LaunchError. Nothing here imports yaml, torch, the config or the launcher.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_MASTER_PORT = 29500  # static rendezvous across nodes (torchrun's default too)
DEFAULT_RDZV_PORT = 29400  # c10d rendezvous endpoint given without a port
PORT_MIN, PORT_MAX = 1, 65535
MAX_NODES = 65536
MAX_NPROC = 4096
TIMEOUT_MIN = 0.001  # seconds; --timeout must be positive
LAUNCHERS = ("torchrun", "accelerate", "deepspeed")
# Launchers of `distrun launch` only, not of a config file: one driver runs every node's
# processes on a cluster of its own (Ray), which the per-node exports cannot describe.
LAUNCH_ONLY = ("ray",)
MIXED_PRECISION = ("no", "fp16", "bf16")
# static and c10d only: every other part of distrun (is_host, --local-addr, rdzv.conf,
# the shared-store fix, the exports) is written for c10d, and torch has deprecated etcd.
RDZV_BACKENDS = ("static", "c10d")
NPROC_WORDS = ("auto", "gpu", "cpu")
# Under srun: one task per node (distrun starts its processes), or one task per rank
SLURM_TASKS = ("per-node", "per-gpu")
# The c10d rendezvous settings torch reads (dynamic_rendezvous, c10d_rendezvous_backend).
RDZV_SETTINGS = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout",
                 "read_timeout", "is_host", "keep_alive_interval", "keep_alive_max_attempt",
                 "store_type")
DEFAULTS: dict[str, object] = {
    "launcher": "torchrun", "nnodes": 1, "nproc_per_node": 1, "node_rank": 0,
    "rdzv.backend": "static", "rdzv.id": "none", "max_restarts": 0, "mixed_precision": "no",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RDZV_NAME = re.compile(r"[a-z][a-z0-9_]*")
_PLAIN_VALUE = re.compile(r"[^,=\s]+")
_RANGE = re.compile(r"([0-9]{1,12}):([0-9]{1,12})")


@dataclass(frozen=True)
class Verdict:
    """Why a setting is refused: `setting` is its config key ("rdzv.conf.join_timeout")."""

    setting: str
    message: str
    hint: str | None = None

    def text(self) -> str:
        """The message and the hint in one line (a config problem has no hint of its own)."""
        return f"{self.message}; {self.hint}" if self.hint else self.message


@dataclass(frozen=True)
class Naming:
    """How settings are called where a verdict is shown: flags (`--node-rank`, "add ...")
    or config keys (`node_rank`, "set ...")."""

    names: Mapping[str, str] = field(default_factory=dict)
    verb: str = "set"

    def __call__(self, setting: str) -> str:
        return self.names.get(setting, setting)

    def example(self, setting: str, name: str, value: object) -> str:
        """How to write `name` = `value` under `setting` (a map: rdzv.conf, env)."""
        if self.verb == "add":
            return f"for example {self(setting)} {name}={value}"
        return f"for example {setting}: {{{name}: {value}}}"


KEYS = Naming()
FLAGS = Naming({name: "--" + name.replace(".", "-").replace("_", "-") for name in (
    "launcher", "nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port",
    "rdzv.backend", "rdzv.endpoint", "rdzv.conf", "rdzv.id", "max_restarts",
    "mixed_precision", "env", "timeout")}, verb="add")


def clip(text: str, limit: int = 60) -> str:
    """Text for a message: printable (lone surrogates escaped), never too long."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-2:]}"


def show(value: object) -> str:
    """A value for a message, as Python writes it (quoted, escaped), clipped."""
    try:
        return clip(repr(value))
    except ValueError:  # an integer of more than 4,300 digits (written in hex)
        return "a number of more than 4,300 digits"


def from_text(text: str) -> int | str:
    """A count typed on the command line: ASCII digits are a number, anything else text."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else text


# ----------------------------------------------------------------- one setting at a time


def count(setting: str, value: int, maximum: int) -> Verdict | None:
    if value < 1:
        return Verdict(setting, "must be at least 1")
    if value > maximum:
        return Verdict(setting, f"{show(value)} is above the maximum {maximum}")
    return None


def node_range(value: int | str) -> tuple[int, int] | Verdict:
    """`nnodes`: a number N, or "MIN:MAX" (elastic) with 1 <= MIN <= MAX <= 65536."""
    if isinstance(value, int) and not isinstance(value, bool):
        return count("nnodes", value, MAX_NODES) or (value, value)
    match = _RANGE.fullmatch(str(value))
    if match and int(match[1]) <= int(match[2]):
        low, high = int(match[1]), int(match[2])
        return count("nnodes", low, MAX_NODES) or count("nnodes", high, MAX_NODES) or (
            low, high)
    return Verdict("nnodes", f"expected N or MIN:MAX with 1 <= MIN <= MAX, got {show(value)}",
                   "for example 2, or 1:4 (elastic)")


def nproc(value: int | str) -> int | str | Verdict:
    """`nproc_per_node`: a number, or auto, gpu or cpu (counted on the node itself)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return count("nproc_per_node", value, MAX_NPROC) or value
    if value in NPROC_WORDS:
        return value
    return Verdict("nproc_per_node", "expected a number, or auto, gpu or cpu, got "
                   f"{show(value)}")


def port(setting: str, value: int) -> Verdict | None:
    if PORT_MIN <= value <= PORT_MAX:
        return None
    side = f"below the minimum {PORT_MIN}" if value < PORT_MIN else (
        f"above the maximum {PORT_MAX}")
    return Verdict(setting, f"{show(value)} is outside {PORT_MIN}..{PORT_MAX}: {side}")


def host(setting: str, text: str) -> Verdict | None:
    """A host name or address: something a resolver takes (no empty label, none over 63
    characters: looking those up fails with a codec error, not an answer)."""
    try:
        text.encode("idna")
        bad = not text or any(c.isspace() for c in text)
    except UnicodeError:
        bad = True
    return Verdict(setting, f"{show(text)}: not a valid host name or address") if bad else None


def endpoint(text: str, naming: Naming = KEYS) -> str | Verdict:
    """`HOST[:PORT]` of the c10d rendezvous, with the default port added when none is given."""
    name, sep, number = text.rpartition(":")
    if not sep:
        return host("rdzv.endpoint", text) or f"{text}:{DEFAULT_RDZV_PORT}"
    bad_host = None if _ipv6(name) else host("rdzv.endpoint", name)
    if bad_host is not None or (":" in name and not _ipv6(name)):
        return bad_host or Verdict("rdzv.endpoint", f"{show(text)} is not HOST:PORT")
    if not (number.isascii() and number.isdigit() and len(number) <= 5) or port(
            "rdzv.endpoint", int(number)):
        return Verdict("rdzv.endpoint", f"{show(text)}: give HOST:PORT with a port in "
                       f"{PORT_MIN}..{PORT_MAX}", f"for example {naming('rdzv.endpoint')} "
                       f"10.0.0.1:{DEFAULT_RDZV_PORT}")
    return text


def _ipv6(name: str) -> bool:
    """An IPv6 address in brackets, as endpoints write it: [::1]."""
    try:
        return name.startswith("[") and name.endswith("]") and bool(
            ipaddress.IPv6Address(name[1:-1]))
    except ValueError:
        return False


def env_name(name: str) -> Verdict | None:
    if _ENV_NAME.fullmatch(name):
        return None
    return Verdict(f"env.{clip(name, 200)}", f"{show(name)} is not a valid environment "
                   "variable name")


def rdzv_setting(name: str, value: str, naming: Naming = KEYS) -> Verdict | None:
    """One c10d setting: a lowercase name as torch reads it, and a value that survives
    torchrun's `k=v,k=v` (no commas, '=' or spaces)."""
    where = f"rdzv.conf.{clip(name, 200)}"
    example = naming.example("rdzv.conf", "join_timeout", 900)
    if not _RDZV_NAME.fullmatch(name):
        guess = _rdzv_guess(name)
        return Verdict(where, f"{show(name)} is not a rendezvous setting name: torch reads "
                       "lowercase NAME=VALUE settings" + (
                           f"; did you mean '{guess}'?" if guess else ""), example)
    if not _PLAIN_VALUE.fullmatch(value):
        return Verdict(where, f"{name}={show(value)} is not a plain value (no commas, '=' or "
                       "spaces)", example)
    return None


def _rdzv_guess(name: str) -> str | None:
    plain = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    if plain in RDZV_SETTINGS:
        return plain
    close = difflib.get_close_matches(plain, RDZV_SETTINGS, n=1)
    return close[0] if close else None


def choice(setting: str, value: str, choices: tuple[str, ...]) -> Verdict | None:
    if value in choices:
        return None
    close = difflib.get_close_matches(value, choices, n=1)
    more = f"; did you mean '{close[0]}'?" if close else ""
    return Verdict(setting, f"{show(value)} is not one of {', '.join(choices)}{more}",
                   f"use one of: {', '.join(choices)}")


# ------------------------------------------------------------------- across settings


@dataclass(frozen=True)
class Plan:
    """The settings the rules across settings look at, each already valid on its own.
    `backend` is None when not given: an endpoint alone means c10d."""

    launcher: str = "torchrun"
    nnodes: tuple[int, int] = (1, 1)
    node_rank: int = 0
    backend: str | None = None
    endpoint: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)

    @property
    def rendezvous(self) -> str:
        return self.backend or ("c10d" if self.endpoint else "static")

    @property
    def nnodes_text(self) -> str:
        low, high = self.nnodes
        return str(high) if low == high else f"{low}:{high}"


def across(plan: Plan, naming: Naming = KEYS) -> list[Verdict]:
    """Every rule across settings that `plan` breaks, in the order a user fixes them."""
    n, found = naming, []
    low, high = plan.nnodes
    static = plan.rendezvous == "static"
    if plan.backend == "static" and plan.endpoint:
        found.append(Verdict("rdzv.endpoint", f"{n('rdzv.endpoint')} is for the c10d "
                             f"rendezvous, but {n('rdzv.backend')} is static",
                             f"leave out {n('rdzv.backend')} static (an endpoint means c10d)"))
    elif not static and not plan.endpoint:
        found.append(Verdict("rdzv.backend", f"{n('rdzv.backend')} {plan.rendezvous} needs "
                             f"{n('rdzv.endpoint')} HOST:PORT"))
    elif low != high and static:
        found.append(Verdict("nnodes", f"{n('nnodes')} {plan.nnodes_text} (elastic) needs a "
                             "rendezvous backend", f"{n.verb} {n('rdzv.endpoint')} HOST:PORT "
                             "(the c10d backend)"))
    if plan.launcher == "accelerate" and low != high:
        found.append(Verdict("launcher", f"accelerate cannot run an elastic job ({n('nnodes')} "
                             "MIN:MAX)", f"use {n('launcher')} torchrun, or a fixed "
                             f"{n('nnodes')}"))
    if plan.launcher == "deepspeed" and not static:
        found.append(Verdict("launcher", "the deepspeed launcher has no rendezvous: every node "
                             f"is started with node 0's address and its own {n('node_rank')}",
                             f"leave out {n('rdzv.endpoint')}, and {n.verb} "
                             f"{n('master_addr')} HOST and {n('node_rank')} on each node"))
    if static and not 0 <= plan.node_rank < high:
        found.append(Verdict("node_rank", f"{n('node_rank')} {plan.node_rank} is outside "
                             f"0..{high - 1}", f"with {n('nnodes')} {high} each node gets a "
                             f"rank from 0 to {high - 1}"))
    elif plan.node_rank < 0:
        found.append(Verdict("node_rank", f"{n('node_rank')} {plan.node_rank}: below the "
                             "minimum 0"))
    if plan.conf and static:
        found.append(Verdict("rdzv.conf", f"{n('rdzv.conf')} applies to the c10d rendezvous",
                             f"{n.verb} {n('rdzv.endpoint')} HOST:PORT"))
    return found


def needs_master_addr(plan: Plan, master_addr: str | None, naming: Naming = KEYS
                      ) -> Verdict | None:
    """A static multi-node job needs node 0's address (a scheduler may supply it)."""
    if plan.nnodes[1] == 1 or plan.rendezvous != "static" or master_addr:
        return None
    n = naming
    return Verdict("nnodes", "a multi-node job needs the address of node 0",
                   f"{n.verb} {n('master_addr')} HOST (node 0's address, the same on every "
                   f"node), or {n('rdzv.endpoint')} HOST:PORT on every node")
