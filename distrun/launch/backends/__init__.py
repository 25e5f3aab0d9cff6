"""Launcher backends: each turns a LaunchSpec into a Command and runs nothing.

`build` picks the backend; what their commands share is in common.py."""

from __future__ import annotations

from distrun.launch.spec import Command, LaunchSpec


def build(spec: LaunchSpec) -> Command:
    if spec.task is not None:  # SLURM started this rank: no launcher between
        from distrun.launch.backends import task

        return task.build(spec)
    if spec.launcher == "accelerate":
        from distrun.launch.backends import accelerate

        return accelerate.build(spec)
    if spec.launcher == "deepspeed":
        from distrun.launch.backends import deepspeed

        return deepspeed.build(spec)
    if spec.launcher == "ray":
        from distrun.launch.backends import ray

        return ray.build(spec)
    from distrun.launch.backends import torchrun

    return torchrun.build(spec)
