"""Upstream files are the projects' own code, never tests of this repository: some are
named like tests (locuslab/TCN's `pmnist_test.py`), and pytest would import them."""

collect_ignore_glob = ["*/upstream/*"]
