"""`python -m distrun` runs the command-line interface."""

from __future__ import annotations

from distrun.cli import main

if __name__ == "__main__":
    main()
