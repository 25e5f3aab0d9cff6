"""What twoloader_sslvae's DISTRUN_SHIM_MAIN_GLOBALS rebinds for the two-process run.

examples/mnist_sslvae.py calls `get_mnist(location="./", batch_size=100,
labels_per_class=10)` with the batch size as a literal (no argument): the two-process
run must read 50 per rank for the global batch of the original's 100.
"""

from __future__ import annotations

import functools


def half_batch(get_mnist):
    """`get_mnist` (the script's own, converted or not) called with half the batch size."""

    @functools.wraps(get_mnist)
    def halved(location="./", batch_size=64, labels_per_class=100):
        return get_mnist(location=location, batch_size=batch_size // 2,
                         labels_per_class=labels_per_class)

    return halved
