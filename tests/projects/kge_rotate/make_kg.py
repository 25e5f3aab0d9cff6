"""A fake knowledge graph for DeepGraphLearning/KnowledgeGraphEmbedding (run by the
harness in the run folder: `setup: python`): data/fake/entities.dict and relations.dict
(`id<TAB>name` lines), train.txt, valid.txt and test.txt (`head<TAB>relation<TAB>tail`
names), the layout of the repository's data/FB15k etc.

3 entities, 2 relations; relation r holds every (h, t) with t != (h + r) mod 3: 6 triples
each, 12 in train.txt. So for every (head, relation) of the training set exactly ONE tail
is not a true tail, and for every (relation, tail) exactly one head is not a true head:
TrainDataset.__getitem__'s rejection sampling (np.random.randint, then the true ones
masked out) can only keep that entity, so the negatives are the same whatever the
process's numpy state (per rank, per DataLoader worker), and every subsampling weight
is equal (each (h, r) and (t, -r-1) counted 2 times + start 4). valid.txt and test.txt
hold 4 of the training triples each (the filtered ranking only logs MRR/Hits@k)."""

from __future__ import annotations

import pathlib

E, R = 3, 2
out = pathlib.Path("data/fake")
out.mkdir(parents=True, exist_ok=True)
ents = [f"e{i}" for i in range(E)]
rels = [f"r{i}" for i in range(R)]
(out / "entities.dict").write_text("".join(f"{i}\t{n}\n" for i, n in enumerate(ents)))
(out / "relations.dict").write_text("".join(f"{i}\t{n}\n" for i, n in enumerate(rels)))
triples = [(h, r, t) for r in range(R) for h in range(E) for t in range(E) if t != (h + r) % E]
assert len(triples) == 12


def lines(ts):
    return "".join(f"{ents[h]}\t{rels[r]}\t{ents[t]}\n" for h, r, t in ts)


(out / "train.txt").write_text(lines(triples))
(out / "valid.txt").write_text(lines(triples[0:12:3]))
(out / "test.txt").write_text(lines(triples[1:12:3]))
