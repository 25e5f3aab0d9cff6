"""`distrun doctor`: checks that find what will break a distributed run, each with its fix.

Every check is a small function taking a `Context` and returning `CheckResult`s; the
CLI renders them. Nothing here prints or exits.
"""

from __future__ import annotations

from collections.abc import Callable

from distrun.doctor.check import Check, CheckResult, Context, Status, installed_version

__all__ = ["Check", "CheckResult", "Context", "Status", "all_checks", "installed_version",
           "run_checks"]


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
