"""Writes a fake graph-classification set in powerful-gnns' text format to
dataset/FAKE/FAKE.txt (what util.load_data reads as 'dataset/%s/%s.txt'): 20 graphs of
4-8 nodes, 2 classes (10 each: the 10-fold StratifiedKFold leaves 18 training graphs),
3 node tags; each node line is `tag n_neighbours neighbour...`."""

import os
import random

rng = random.Random(0)
os.makedirs("dataset/FAKE", exist_ok=True)
lines = ["20"]
for i in range(20):
    label = i % 2
    n = rng.randint(4, 8)
    adj = {j: set() for j in range(n)}
    for j in range(1, n):  # a random tree keeps every graph connected
        k = rng.randrange(j)
        adj[j].add(k)
        adj[k].add(j)
    for _ in range(n // 2 + label):  # class 1 graphs get one more extra edge
        a, b = rng.sample(range(n), 2)
        adj[a].add(b)
        adj[b].add(a)
    lines.append(f"{n} {label}")
    for j in range(n):
        nbrs = sorted(adj[j])
        tag = rng.randrange(3)
        lines.append(" ".join(str(x) for x in [tag, len(nbrs), *nbrs]))
with open("dataset/FAKE/FAKE.txt", "w") as f:
    f.write("\n".join(lines) + "\n")
