"""A fake PROTEINS for graph_unet (run by the harness in the run folder: `setup: python`):
data/PROTEINS/PROTEINS_{A,graph_indicator,graph_labels,node_labels}.txt in the TU
graph-kernel datasets' text format (1-based node ids, one edge per line in both
directions), which DataReader reads from ./data/PROTEINS/. 20 graphs of 4 to 8 nodes,
so that 10-fold cross-validation trains on 18 graphs a fold: one batch of 18 (2 x 9)."""

from __future__ import annotations

import pathlib

import numpy as np

GRAPHS, NODE_LABELS = 20, 3

rng = np.random.default_rng(0)
folder = pathlib.Path("data/PROTEINS")
folder.mkdir(parents=True, exist_ok=True)
edges, indicator, node_labels, graph_labels = [], [], [], []
first = 1
for g in range(GRAPHS):
    n = int(rng.integers(4, 9))
    label = g % 2
    graph_labels.append(label + 1)  # TU labels need not start at 0: DataReader shifts them
    for _ in range(n):
        indicator.append(g + 1)
        # node labels that say something about the class, so that training learns
        node_labels.append(int(rng.integers(0, NODE_LABELS)) if rng.random() < 0.6 else label)
    # a ring (no isolated node) plus a few chords
    pairs = {(i, (i + 1) % n) for i in range(n)}
    for _ in range(int(rng.integers(0, 3))):
        a, b = rng.choice(n, 2, replace=False)
        pairs.add((int(a), int(b)))
    pairs = {(min(a, b), max(a, b)) for a, b in pairs if a != b}
    for a, b in sorted(pairs):
        edges.append((first + a, first + b))
        edges.append((first + b, first + a))
    first += n
(folder / "PROTEINS_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
(folder / "PROTEINS_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
(folder / "PROTEINS_graph_labels.txt").write_text("".join(f"{y}\n" for y in graph_labels))
(folder / "PROTEINS_node_labels.txt").write_text("".join(f"{v}\n" for v in node_labels))
