"""`distrun launch` checks: the rules, the static look at the script, the probe inside
each worker (boot.py, probe.py and its parts probe_*.py) and the verdict that compares
the ranks."""
