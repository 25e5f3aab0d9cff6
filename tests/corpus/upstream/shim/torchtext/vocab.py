"""`build_vocab_from_iterator`: the specials first, then tokens by falling frequency
(ties in order of first appearance), as torchtext orders them."""

from collections import Counter


class Vocab:
    def __init__(self, tokens: list[str]) -> None:
        self._itos = tokens
        self._stoi = {t: i for i, t in enumerate(tokens)}
        self._default: int | None = None

    def set_default_index(self, index: int) -> None:
        self._default = index

    def __getitem__(self, token: str) -> int:
        found = self._stoi.get(token, self._default)
        if found is None:
            raise RuntimeError(f"token {token!r} not found and no default index is set")
        return found

    def __call__(self, tokens: list[str]) -> list[int]:
        return [self[t] for t in tokens]

    def __len__(self) -> int:
        return len(self._itos)


def build_vocab_from_iterator(iterator, specials=()):
    counts: Counter[str] = Counter()
    order: dict[str, int] = {}
    for tokens in iterator:
        for token in tokens:
            counts[token] += 1
            order.setdefault(token, len(order))
    ranked = sorted(counts, key=lambda t: (-counts[t], order[t]))
    return Vocab([*specials, *(t for t in ranked if t not in specials)])
