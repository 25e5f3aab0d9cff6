"""Launching: a resolved, backend-neutral LaunchSpec -> a backend's Command -> the runner.

Backends only build commands; only `runner` starts processes.
"""

from __future__ import annotations

from distrun.launch.spec import Command, LaunchSpec

__all__ = ["Command", "LaunchSpec"]
