"""What several exports share: the templates they render, the `distrun launch` line a
node runs under a scheduler, and the pieces of a Kubernetes container (image, resources,
environment) that the PyTorchJob and TrainJob exports both write.

`r` is always a resolved config (`Config.resolved()`, checked by `exports._checked`).
Nothing here imports torch.
"""

from __future__ import annotations

import textwrap
from importlib import resources
from typing import Any

from distrun.config.load import Config
from distrun.errors import InputError


def template(name: str) -> str:
    return resources.files("distrun.templates").joinpath(name).read_text(encoding="utf-8")


def comments(text: str) -> str:
    """A template's leading comment lines (safe_dump drops comments)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line + "\n")
    return "".join(lines)


def comment_block(title: str, items: list[str], width: int = 92) -> str:
    """`items` as YAML/shell comment lines under `title`, each wrapped to `width`."""
    if not items:
        return ""
    out = [f"# {title}\n"]
    for item in items:
        out += [line + "\n" for line in textwrap.wrap(
            item, width, initial_indent="# - ", subsequent_indent="#   ",
            break_on_hyphens=False, break_long_words=False)]
    return "".join(out)


def user_env(r: dict[str, Any]) -> dict[str, str]:
    env = dict(r["env"])
    if r["mixed_precision"] != "no":
        env.setdefault("DISTRUN_MIXED_PRECISION", r["mixed_precision"])
        env.setdefault("ACCELERATE_MIXED_PRECISION", r["mixed_precision"])
    return env


def launch_args(r: dict[str, Any], with_env: bool = True, with_port: bool = True
                ) -> list[str]:
    """`distrun launch` options for a node that learns its rank from the scheduler."""
    args = ["--nproc-per-node", str(r["nproc_per_node"])]
    if r["launcher"] != "torchrun":
        args += ["--launcher", r["launcher"]]
    if r["mixed_precision"] != "no":
        args += ["--mixed-precision", r["mixed_precision"]]
    if r["max_restarts"]:
        args += ["--max-restarts", str(r["max_restarts"])]
    if r["timeout"]:
        args += ["--timeout", f"{r['timeout']:g}"]
    if r["master_port"] and with_port:
        args += ["--master-port", str(r["master_port"])]
    if r["log_dir"]:
        args += ["--log-dir", r["log_dir"]]
    for key, value in sorted(r["rdzv"]["conf"].items()):
        args += ["--rdzv-conf", f"{key}={value}"]
    if with_env:
        for key, value in sorted(r["env"].items()):
            args += ["--env", f"{key}={value}"]
    return args


def target(r: dict[str, Any]) -> list[str]:
    return [*(["-m"] if r["module"] else []), r["script"], *r["script_args"]]


def require_image(config: Config, r: dict[str, Any]) -> None:
    if not r["kubernetes"]["image"]:
        raise InputError(f"{config.path}: kubernetes.image is not set",
                         "add kubernetes: {image: REGISTRY/IMAGE:TAG} (with PyTorch, distrun "
                         "and your script)")


def pod_resources(k: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """A pod's `resources` (limits and requests alike) from the `kubernetes:` section.

    Quantities as strings ('4', not 4): their type in the Kubernetes OpenAPI spec, and the
    form the API server gives back (the Kubeflow CRDs also take integers)."""
    limits: dict[str, str] = {}
    if k["gpus_per_node"]:
        limits["nvidia.com/gpu"] = str(k["gpus_per_node"])
    for key in ("cpu", "memory"):
        if k[key]:
            limits[key] = str(k[key])
    return {"limits": limits, "requests": dict(limits)} if limits else None


def env_list(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": n, "value": v} for n, v in sorted(env.items())]
