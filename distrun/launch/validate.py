"""The first step of `resolve`: a LaunchRequest checked against the launch rules.

Pure: no sockets, no torch, nothing about this machine but whether the script exists.
Every value is checked by distrun.launch_rules (the rules `config validate` uses) and the
first broken rule is raised as a LaunchError (exit code 2, nothing started); the result
is the request's values, parsed, with the defaults filled in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from distrun import launch_rules as rules
from distrun.errors import LaunchError
from distrun.launch.spec import LaunchRequest, TaskRank
from distrun.launch_rules import FLAGS, Verdict

T = TypeVar("T")


@dataclass(frozen=True)
class Checked:
    """A request that breaks no rule; `nproc_per_node` may still be a word (auto/gpu/cpu)
    and `master_port` None (chosen on this machine by the next step)."""

    script: str
    plan: rules.Plan
    script_args: tuple[str, ...] = ()
    module: bool = False
    nproc_per_node: int | str = 1
    master_addr: str | None = None
    master_port: int | None = None
    endpoint: str | None = None  # HOST:PORT, the default port filled in
    rdzv_id: str = "none"
    max_restarts: int = 0
    mixed_precision: str = "no"
    env: Mapping[str, str] = field(default_factory=dict)
    log_dir: str | None = None
    timeout: float | None = None
    task: TaskRank | None = None  # SLURM started one task per rank: this one
    address: str | None = None  # --launcher ray: the cluster to join

    @property
    def multi_node(self) -> bool:
        return self.plan.nnodes[1] > 1


def validate(req: LaunchRequest) -> Checked:
    """`req` checked against every rule, or the first broken one as a LaunchError."""
    launcher = req.launcher or str(rules.DEFAULTS["launcher"])
    if launcher not in (*rules.LAUNCHERS, *rules.LAUNCH_ONLY):
        raise LaunchError(f"unknown launcher {launcher!r}",
                          f"use one of: {', '.join((*rules.LAUNCHERS, *rules.LAUNCH_ONLY))}")
    _ray_rules(req, launcher)
    script = _script(req)
    nproc = rules.nproc(rules.from_text(
        req.nproc_per_node or str(rules.DEFAULTS["nproc_per_node"])))
    if isinstance(nproc, Verdict):
        raise _error(nproc, prefix=True)
    nnodes = _value(rules.node_range(rules.from_text(
        req.nnodes or str(rules.DEFAULTS["nnodes"]))))
    plan = _plan(req, launcher, nnodes)
    _needs_master_addr(req, plan)
    if req.master_addr:
        _first(rules.host("master_addr", req.master_addr), prefix=True)
    if req.master_port is not None:
        _first(rules.port("master_port", req.master_port), prefix=True)
    _check_numbers(req)
    mixed = req.mixed_precision or str(rules.DEFAULTS["mixed_precision"])
    _first(rules.choice("mixed_precision", mixed, rules.MIXED_PRECISION), prefix=True)
    _precision_reaches(script, mixed, req.module)
    for name in req.env:
        _first(rules.env_name(name), prefix=True)
    return Checked(
        script=script, plan=plan, script_args=tuple(req.script_args), module=req.module,
        address=req.address or None,
        log_dir=req.log_dir, timeout=req.timeout, nproc_per_node=nproc,
        master_addr=req.master_addr or None, master_port=req.master_port,
        endpoint=plan.endpoint,
        rdzv_id=req.rdzv_id or str(rules.DEFAULTS["rdzv.id"]),
        max_restarts=req.max_restarts or 0, mixed_precision=mixed, env=dict(req.env),
        task=req.task)


def _plan(req: LaunchRequest, launcher: str, nnodes: tuple[int, int]) -> rules.Plan:
    """The rendezvous settings, each checked, then the rules across them."""
    if req.rdzv_backend is not None:
        _first(rules.choice("rdzv.backend", req.rdzv_backend, rules.RDZV_BACKENDS),
               prefix=True)
    endpoint = None
    if req.rdzv_endpoint:
        endpoint = _value(rules.endpoint(req.rdzv_endpoint, FLAGS))
    for key, value in req.rdzv_conf.items():
        _first(rules.rdzv_setting(key, value, FLAGS), prefix=True)
    plan = rules.Plan(launcher=launcher, nnodes=nnodes, node_rank=req.node_rank or 0,
                      backend=req.rdzv_backend or None, endpoint=endpoint,
                      conf=dict(req.rdzv_conf))
    for verdict in rules.across(plan, FLAGS):
        _first(verdict)
    return plan


# What the ray launcher leaves to Ray (the request's field, the flag, why).
_RAY_CHOOSES = (
    ("rdzv_endpoint", "--rdzv-endpoint", "Ray starts every rank: there is no rendezvous"),
    ("rdzv_backend", "--rdzv-backend", "Ray starts every rank: there is no rendezvous"),
    ("node_rank", "--node-rank", "one command runs every node's processes"),
    ("master_addr", "--master-addr", "Ray Train sets rank 0's address"),
    ("master_port", "--master-port", "rank 0 picks a free port on its node"),
    ("max_restarts", "--max-restarts", "distrun does not restart a Ray Train job"),
)


def _ray_rules(req: LaunchRequest, launcher: str) -> None:
    """--address is the ray launcher's; the settings Ray decides are refused with it,
    as is an elastic node range."""
    if launcher not in rules.LAUNCH_ONLY:
        if req.address:
            raise LaunchError(f"--address {req.address}: a Ray cluster's address, for "
                              f"--launcher ray (the launcher is {launcher})",
                              "add --launcher ray, or leave out --address")
        return
    if req.address is not None and not req.address.strip():
        raise LaunchError("--address: empty", "give the Ray cluster's address (auto, "
                          "HOST:PORT or ray://HOST:PORT), or leave it out for a local one")
    for name, flag, why in _RAY_CHOOSES:
        if getattr(req, name) not in (None, 0, ""):
            raise LaunchError(f"{flag} does not apply to --launcher ray: {why}",
                              f"leave out {flag}")
    if req.rdzv_conf:
        raise LaunchError("--rdzv-conf does not apply to --launcher ray: Ray starts every "
                          "rank: there is no rendezvous", "leave out --rdzv-conf")
    if req.nnodes and ":" in req.nnodes:
        raise LaunchError(f"--nnodes {req.nnodes}: --launcher ray runs a fixed number of "
                          "workers", "give --nnodes N (with --nproc-per-node M: N x M "
                          "workers)")


def _needs_master_addr(req: LaunchRequest, plan: rules.Plan) -> None:
    """A multi-node job without node 0's address: named as the config file's key (with
    its line) when the file set the node count, else as the flags."""
    verdict = None if plan.launcher in rules.LAUNCH_ONLY else rules.needs_master_addr(
        plan, req.master_addr, FLAGS)
    where = req.origin.get("nnodes")
    if verdict is None or where is None:
        _first(verdict)
        return
    file = where.rpartition(":")[0]
    raise LaunchError(f"{where}: nnodes is {req.nnodes}: {verdict.message} (master_addr)",
                      f"set `master_addr: HOST` in {file} (node 0's address, the same on "
                      "every node), or `rdzv.endpoint: HOST:PORT`; or add --master-addr HOST")


def _check_numbers(req: LaunchRequest) -> None:
    if req.max_restarts is not None and req.max_restarts < 0:
        raise LaunchError("--max-restarts must be 0 or more")
    if req.max_restarts and req.launcher == "deepspeed":
        raise LaunchError("the deepspeed launcher restarts nothing: --max-restarts "
                          f"{req.max_restarts} cannot apply", "leave out --max-restarts, or "
                          "--launcher torchrun (the converted script runs under both)")
    if req.timeout is not None and not req.timeout >= rules.TIMEOUT_MIN:
        raise LaunchError("--timeout must be a positive number of seconds",
                          f"at least {rules.TIMEOUT_MIN:g}")


def _precision_reaches(script: str, mixed: str, module: bool) -> None:
    """--mixed-precision reaches a script only through accelerate's Accelerator (or a
    script that reads ACCELERATE_/DISTRUN_MIXED_PRECISION itself): elsewhere it would
    train in fp32 without a word."""
    if mixed == "no" or module or not script.endswith(".py"):
        return
    try:
        text = Path(script).read_text(errors="replace")
    except OSError:
        return
    if "accelerate" in text or "MIXED_PRECISION" in text:
        return
    raise LaunchError(f"--mixed-precision {mixed}: {script} does not use accelerate, so "
                      "nothing in it would read this choice (it would train in fp32)",
                      f"convert it with `distrun convert --amp {mixed}` (autocast in the "
                      "script) or `--to accelerate`, then launch without --mixed-precision "
                      "(or with it, for an accelerate script)")


def _script(req: LaunchRequest) -> str:
    if not req.script:
        raise LaunchError("no script given", "distrun launch [OPTIONS] SCRIPT [ARGS...]")
    if req.module:
        return req.script
    path = Path(req.script)
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError as err:  # a name longer than the file system allows
        raise LaunchError(f"{req.script[:80]!r}: {err.strerror}") from None
    if not is_file:
        what = "is a directory" if is_dir else "no such file"
        close = None if is_dir else closest_file(path)
        raise LaunchError(f"{req.script}: {what}", f"did you mean {close}?" if close else
                          "give the path of the Python script to run (or -m MODULE for a "
                          "module)")
    if path.suffix == ".ipynb":
        script = path.with_name(f"{path.stem}_ddp.py")
        raise LaunchError(f"{req.script}: a Jupyter notebook cannot be launched (its cells are "
                          "JSON, not a script)", f"convert it first: `distrun convert "
                          f"{req.script}` writes {script}, then `distrun launch ... {script}`")
    return req.script


def closest_file(path: Path) -> str | None:
    """The file beside a missing script whose name is closest to its name, if one is close."""
    import difflib

    try:
        names = [p.name for p in path.parent.iterdir() if p.is_file()]
    except OSError:
        return None
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    return str(path.with_name(close[0])) if close else None


def _value(checked: T | Verdict) -> T:
    """A value a rule parsed, or its verdict raised (naming the flag)."""
    if isinstance(checked, Verdict):
        raise _error(checked, prefix=True)
    return checked


def _first(verdict: Verdict | None, prefix: bool = False) -> None:
    """Raise `verdict`, if any, as a LaunchError."""
    if verdict is not None:
        raise _error(verdict, prefix)


def _error(verdict: Verdict, prefix: bool) -> LaunchError:
    """`prefix`: the message is about a value, so it starts with the flag that gave it."""
    setting = verdict.setting
    for group in ("env", "rdzv.conf"):
        if setting.startswith(f"{group}."):
            setting = group
    message = f"{FLAGS(setting)}: {verdict.message}" if prefix else verdict.message
    return LaunchError(message, verdict.hint)
