"""A fake SemEval-2010 task 8 for rbert_trainer: data/label.txt (3 relations),
data/train.tsv (8 sentences) and data/test.tsv (4), `label<TAB>sentence` with the
entities marked `<e1> ... </e1>` / `<e2> ... </e2>` between spaces, as upstream's."""

import os
import random

LABELS = ["Other", "Cause-Effect(e1,e2)", "Component-Whole(e2,e1)"]
WORDS = ("the a system cat mat child cradle antenna elements cord wrapped sat on by of "
         "means was carefully bound into array configuration").split()


def sentence(rng):
    left = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    e1 = rng.choice(WORDS)
    middle = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    e2 = rng.choice(WORDS)
    return f"{left} <e1> {e1} </e1> {middle} <e2> {e2} </e2> ."


rng = random.Random(5)
os.makedirs("data", exist_ok=True)
os.makedirs("eval", exist_ok=True)
with open("data/label.txt", "w") as f:
    f.write("\n".join(LABELS) + "\n")
for name, count in (("train.tsv", 8), ("test.tsv", 4)):
    with open(os.path.join("data", name), "w") as f:
        for i in range(count):
            f.write(f"{LABELS[i % len(LABELS)]}\t{sentence(rng)}\n")
