"""Fake `wilds`: DomainBed's datasets.py imports two WILDS dataset classes at module
level; the corpus trains ColoredMNIST, so they only need to exist (building one raises)."""
