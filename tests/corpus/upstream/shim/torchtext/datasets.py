"""`WikiText2`: deterministic synthetic lines instead of the download. The sizes (lines
per split) come from DISTRUN_SHIM_TEXT_LINES="train,valid,test" (default 220,44,44)."""

import os

_WORDS = ("the model reads a sequence of words and learns which word comes next in "
          "every sentence of this small synthetic corpus").split()


def _lines(split: str) -> list[str]:
    sizes = os.environ.get("DISTRUN_SHIM_TEXT_LINES", "220,44,44").split(",")
    count = int(sizes[("train", "valid", "test").index(split)])
    offset = {"train": 0, "valid": 7, "test": 13}[split]
    lines = []
    for n in range(count):
        k = (n * 5 + offset) % len(_WORDS)
        lines.append(" ".join(_WORDS[(k + 3 * j + n % 4) % len(_WORDS)] for j in range(10)))
    return lines


def WikiText2(root: str = ".data", split=("train", "valid", "test")):
    if isinstance(split, str):
        return iter(_lines(split))
    return tuple(iter(_lines(s)) for s in split)
