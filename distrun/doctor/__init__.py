"""`distrun doctor`: checks that find what will break a distributed run, each with its fix.

Every check is a small function taking a `Context` and returning `CheckResult`s; the
CLI renders them. Nothing here prints or exits.
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


def all_checks() -> list[Check]:
    from distrun.doctor import deepspeed, fsdp, network, platform, smoke, software, system

    return [*platform.CHECKS, *system.CHECKS, *software.CHECKS, *fsdp.CHECKS, *deepspeed.CHECKS,
            *network.CHECKS, *smoke.CHECKS]


def run_checks(ctx: Context, checks: list[Check] | None = None,
               done: Callable[[CheckResult], object] | None = None) -> list[CheckResult]:
    """Every check's results, in order; `done(result)` is called as each one is known
    (the CLI prints it then: the smoke test takes seconds)."""
    results: list[CheckResult] = []
    for check in checks if checks is not None else all_checks():
        try:
            for result in check(ctx):
                results.append(result)
                if done is not None:
                    done(result)
        except Exception as exc:  # a check that breaks must not hide the others
            broken = CheckResult(getattr(check, "__name__", "check").removeprefix(
                "check_").replace("_", " "), "fail", f"the check itself failed: "
                f"{type(exc).__name__}: {exc}", "report this as a distrun bug")
            results.append(broken)
            if done is not None:
                done(broken)
    return results
