"""Fake `natsort` (imported by dataset.py for RawDataset, unused in training)."""


def natsorted(seq, *args, **kwargs):
    return sorted(seq)
