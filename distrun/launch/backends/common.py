"""What every backend's command shares: the workers' environment, the script and its
arguments, the c10d settings. The backends import these from here, not from the package
that picks among them."""

from __future__ import annotations

from distrun.launch.spec import LaunchSpec


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
