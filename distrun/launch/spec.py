"""The launch description every backend reads, and the command a backend returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchSpec:
    """What to run, on how many processes. Resolved: no 'auto' values left."""

    script: str
    script_args: tuple[str, ...] = ()
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str]
