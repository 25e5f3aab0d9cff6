"""Launcher backends: each turns a LaunchSpec into a Command and runs nothing."""

from __future__ import annotations

from distrun.launch.spec import Command, LaunchSpec


def build(spec: LaunchSpec) -> Command:
    if spec.launcher == "accelerate":
        from distrun.launch.backends import accelerate

        return accelerate.build(spec)
    if spec.launcher == "deepspeed":
        from distrun.launch.backends import deepspeed

        return deepspeed.build(spec)
    from distrun.launch.backends import torchrun

    return torchrun.build(spec)


def job_env(spec: LaunchSpec) -> dict[str, str]:
    """Variables every backend gives the workers: the user's --env, the mixed precision
    (for scripts that read it), and unbuffered output so progress shows as it happens."""
    env = {"PYTHONUNBUFFERED": "1", "DISTRUN_MIXED_PRECISION": spec.mixed_precision,
           "ACCELERATE_MIXED_PRECISION": spec.mixed_precision}
    env.update(dict(spec.env))
    return env


def target(spec: LaunchSpec) -> list[str]:
    return [*(["-m"] if spec.module else []), spec.script, *spec.script_args]


def rdzv_conf(spec: LaunchSpec) -> str:
    """The c10d settings as torchrun reads them (`k=v,k=v`): the user's, and is_host=1 on
    the node that owns the endpoint's address unless the user said otherwise."""
    conf = dict(spec.rdzv_conf)
    if spec.rdzv_is_host:
        conf.setdefault("is_host", "1")
    return ",".join(f"{key}={value}" for key, value in sorted(conf.items()))
