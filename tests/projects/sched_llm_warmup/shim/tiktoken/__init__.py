"""A byte-level stand-in for tiktoken (not installed; its BPE files are downloaded).

`get_encoding(name)` gives an Encoding whose token ids are the UTF-8 bytes of the text
(0-255), so a model configured with vocab_size 256 can read them; `decode` turns the ids
back into text (bytes that are not UTF-8 replaced). Only what the corpus's notebook
calls: encode(text, allowed_special=...), decode(ids), n_vocab, name.
"""


class Encoding:
    n_vocab = 256

    def __init__(self, name):
        self.name = name

    def encode(self, text, allowed_special=(), disallowed_special=()):
        return list(text.encode("utf-8"))

    def decode(self, tokens):
        return bytes(int(t) % 256 for t in tokens).decode("utf-8", errors="replace")


def get_encoding(name):
    return Encoding(name)
