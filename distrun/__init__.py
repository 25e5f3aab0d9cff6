"""distrun: turn single-GPU PyTorch scripts into distributed ones and launch them.

Importing this package is cheap: torch, libcst and yaml are imported only by the
commands that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"
