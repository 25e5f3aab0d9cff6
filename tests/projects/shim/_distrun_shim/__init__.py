"""Helpers of the projects' shim (see ../sitecustomize.py)."""
