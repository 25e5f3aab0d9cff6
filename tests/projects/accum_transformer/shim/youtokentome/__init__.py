"""A fake `youtokentome` (the BPE tokenizer of a-PyTorch-Tutorial-to-Transformers, a C++
extension not installed here), word level: `BPE(model=PATH)` reads the vocabulary that
make_translation_data.py writes (one subword a line, the four specials first, as
youtokentome numbers them: <PAD> 0, <UNK> 1, <BOS> 2, <EOS> 3); `encode` splits on
spaces; `vocab_size`, `subword_to_id`, `id_to_subword`, `decode`."""

from __future__ import annotations

import enum


class OutputType(enum.Enum):
    ID = 1
    SUBWORD = 2


class BPE:
    def __init__(self, model: str, n_threads: int = -1) -> None:
        del n_threads
        with open(model, encoding="utf-8") as f:
            self._vocab = [line.rstrip("\n") for line in f if line.strip()]
        self._ids = {word: i for i, word in enumerate(self._vocab)}

    def vocab_size(self) -> int:
        return len(self._vocab)

    def subword_to_id(self, subword: str) -> int:
        return self._ids.get(subword, 1)

    def id_to_subword(self, i: int) -> str:
        return self._vocab[i]

    def encode(self, sentences, output_type=OutputType.ID, bos=False, eos=False,
               reverse=False, dropout_prob=0):
        del dropout_prob
        out = []
        for sentence in sentences:
            words = sentence.split()
            if reverse:
                words = words[::-1]
            if output_type == OutputType.ID:
                ids = [self._ids.get(w, 1) for w in words]
                out.append(([2] if bos else []) + ids + ([3] if eos else []))
            else:
                out.append((["<BOS>"] if bos else []) + words + (["<EOS>"] if eos else []))
        return out

    def decode(self, ids, ignore_ids=None):
        ignore = set(ignore_ids or [])
        return [" ".join(self._vocab[i] for i in seq if i not in ignore) for seq in ids]

    @staticmethod
    def train(*args, **kwargs):
        raise RuntimeError("youtokentome shim: BPE.train is not faked (prepare_data.py)")
