"""What every doctor check shares: the `Context` it reads, the `CheckResult`s it returns.

Each check module imports these from here (and the package re-exports them), so the
checks depend on this module, not on the package that lists them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    hint: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Context:
    """What the checks look at: the options, the environment, the launch settings."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    master_addr: str | None = None
    master_port: int | None = None
    nproc_per_node: str | None = None
    nnodes: int = 1
    smoke: bool = True
    bandwidth: bool = False

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1


Check = Callable[[Context], Iterable[CheckResult]]


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
