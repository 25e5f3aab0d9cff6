"""A fake tiktoken for moe_sparse (not installed here; the real one downloads its BPE
files): `get_encoding(name)` returns a character-level encoding over a small vocabulary
(`n_vocab` 64: each character's code point modulo 64), enough for train.py's
TinyStoriesDataset (`enc.encode(text)`, `enc.n_vocab`)."""


class Encoding:
    n_vocab = 64

    def __init__(self, name):
        self.name = name

    def encode(self, text, **kwargs):
        return [ord(c) % self.n_vocab for c in text]

    def decode(self, tokens, **kwargs):
        return "".join(chr(32 + t) for t in tokens)


def get_encoding(name):
    return Encoding(name)
